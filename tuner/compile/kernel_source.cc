#include "tuner/compile/kernel_source.h"

#include <map>
#include <memory>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kernel_templates/embedded.h"
#include "tuner/core/sha256.h"

namespace ktune {
namespace {

constexpr std::string_view kTemplateSuffix = ".cuh";

// The embedded files a text includes with #include "path" (quoted includes
// only: templates include nothing else). Unknown names are left to NVRTC,
// which reports them as compile errors.
std::vector<std::string> QuotedIncludes(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string_view::npos || line[i] != '#') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string_view::npos || line.substr(i, 7) != "include") continue;
    const size_t open = line.find('"', i + 7);
    if (open == std::string_view::npos) continue;
    const size_t close = line.find('"', open + 1);
    if (close == std::string_view::npos) continue;
    out.emplace_back(line.substr(open + 1, close - open - 1));
  }
  return out;
}

class Registry {
 public:
  Registry() {
    std::map<std::string, std::string_view> files;
    for (const EmbeddedFile& f : EmbeddedTemplateFiles()) files.emplace(f.path, f.text);
    for (const auto& [path, text] : files) {
      std::string_view p(path);
      if (p.size() <= kTemplateSuffix.size() || p.substr(p.size() - kTemplateSuffix.size()) != kTemplateSuffix) {
        continue;
      }
      auto source = std::make_unique<KernelSource>();
      source->template_id = std::string(p.substr(0, p.size() - kTemplateSuffix.size()));
      source->path = path;
      source->text = std::string(text);
      for (const auto& [name, body] : files) {
        source->header_names.push_back(name);
        source->header_texts.emplace_back(body);
      }
      source->hash = HashWithIncludes(path, files);
      sources_.emplace(source->template_id, std::move(source));
    }
  }

  const KernelSource* Find(const std::string& id) const {
    auto it = sources_.find(id);
    return it == sources_.end() ? nullptr : it->second.get();
  }

 private:
  // SHA-256 over (path, text) of the top-level file and every embedded file it
  // reaches through includes, in path order, each field NUL-terminated so no
  // two different file sets hash alike.
  static std::string HashWithIncludes(const std::string& top, const std::map<std::string, std::string_view>& files) {
    std::set<std::string> used;
    std::vector<std::string> pending{top};
    while (!pending.empty()) {
      std::string path = std::move(pending.back());
      pending.pop_back();
      auto it = files.find(path);
      if (it == files.end() || !used.insert(path).second) continue;
      for (std::string& inc : QuotedIncludes(it->second)) pending.push_back(std::move(inc));
    }
    std::string material;
    for (const std::string& path : used) {
      material.append(path).push_back('\0');
      material.append(files.at(path)).push_back('\0');
    }
    return Sha256Hex(material);
  }

  std::map<std::string, std::unique_ptr<KernelSource>> sources_;
};

const Registry& GetRegistry() {
  static const Registry* registry = new Registry();
  return *registry;
}

}  // namespace

absl::StatusOr<const KernelSource*> FindKernelSource(const std::string& template_id) {
  const KernelSource* source = GetRegistry().Find(template_id);
  if (source == nullptr) {
    return absl::NotFoundError(absl::StrCat("no kernel template \"", template_id, "\" is embedded in this binary"));
  }
  return source;
}

}  // namespace ktune
