// deploy/: every Kubernetes manifest parses, the systemd unit and the
// container keep their contract, and every ktuned / ktune flag that deploy/
// uses is a real flag of the built binaries (read from their --help, so a
// renamed or removed flag fails here, not at 3 a.m. on a node). Also
// ktuned's systemd readiness notification, over a real datagram socket.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

using testing::CommandResult;
using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

const std::filesystem::path kDeploy = std::filesystem::path(KTUNE_SOURCE_DIR) / "deploy";

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ------------------------------------------------------------ CLI grammar

// One command level of a binary, as its --help describes it.
struct CommandSpec {
  std::map<std::string, bool> options;  // "--db" -> takes a value
  std::map<std::string, CommandSpec> subcommands;
};

// Parses CLI11's help: option lines ("  -o,--output TEXT  ...": a value when
// a TYPE follows after one space) and the names under "Subcommands:".
void ParseHelp(const std::string& help, CommandSpec* spec, std::vector<std::string>* subcommands) {
  static const std::regex option_line(R"(^\s+(-[^\s]+)( [A-Z]+)?)");
  static const std::regex subcommand_line(R"(^  ([a-z][a-z0-9-]*)\s)");
  bool in_subcommands = false;
  for (absl::string_view raw : absl::StrSplit(help, '\n')) {
    const std::string line(raw);
    if (line.rfind("Subcommands:", 0) == 0) {
      in_subcommands = true;
      continue;
    }
    if (!line.empty() && line[0] != ' ') in_subcommands = false;
    std::smatch m;
    if (in_subcommands) {
      if (std::regex_search(line, m, subcommand_line)) subcommands->push_back(m[1]);
    } else if (std::regex_search(line, m, option_line)) {
      for (absl::string_view name : absl::StrSplit(m[1].str(), ',')) {
        spec->options[std::string(name)] = m[2].matched;
      }
    }
  }
}

// The grammar of `binary` and its subcommands, recursively, from --help.
CommandSpec LoadSpec(const std::string& binary, const std::string& path, const std::string& scratch) {
  CommandSpec spec;
  std::vector<std::string> subcommands;
  const CommandResult help = RunCommand(binary + path + " --help", scratch);
  REQUIRE(help.exit_code == 0);
  ParseHelp(help.out, &spec, &subcommands);
  REQUIRE(spec.options.count("--help") == 1);
  for (const std::string& sub : subcommands) {
    spec.subcommands[sub] = LoadSpec(binary, path + " " + sub, scratch);
  }
  return spec;
}

struct Grammars {
  CommandSpec ktuned, ktune;
};

const Grammars& BinaryGrammars() {
  static const Grammars* grammars = [] {
    TempDir scratch;
    auto* g = new Grammars;
    g->ktuned = LoadSpec(KTUNED_PATH, "", scratch.path());
    g->ktune = LoadSpec(KTUNE_CLI_PATH, "", scratch.path());
    return g;
  }();
  return *grammars;
}

// ------------------------------------------------------------ commands in deploy/

// Splits shell text into words, honouring quotes; ";", "&&", "||", "|" and
// newlines end a command. Enough for the scripts in manifests, not a shell.
std::vector<std::vector<std::string>> ShellCommands(const std::string& text) {
  std::vector<std::vector<std::string>> commands(1);
  std::string word;
  bool have_word = false;
  char quote = 0;
  auto end_word = [&] {
    if (have_word) commands.back().push_back(word);
    word.clear();
    have_word = false;
  };
  auto end_command = [&] {
    end_word();
    if (!commands.back().empty()) commands.emplace_back();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '"' || c == '\'') {
      quote = c;
      have_word = true;
    } else if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;  // line continuation
    } else if (c == ' ' || c == '\t') {
      end_word();
    } else if (c == '\n' || c == ';' || c == '|' || (c == '&' && i + 1 < text.size() && text[i + 1] == '&')) {
      if (c == '&' || (c == '|' && i + 1 < text.size() && text[i + 1] == '|')) ++i;
      end_command();
    } else {
      word += c;
      have_word = true;
    }
  }
  end_command();
  commands.pop_back();
  return commands;
}

// Every flag problem of one argv that runs ktune or ktuned ("" if fine).
std::vector<std::string> CheckInvocation(const std::vector<std::string>& argv) {
  std::vector<std::string> problems;
  const std::string binary = std::filesystem::path(argv[0]).filename().string();
  const CommandSpec* spec = binary == "ktuned" ? &BinaryGrammars().ktuned : &BinaryGrammars().ktune;
  std::string where = binary;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.size() > 1 && arg[0] == '-') {
      const std::string name = arg.substr(0, arg.find('='));
      auto it = spec->options.find(name);
      if (it == spec->options.end()) {
        problems.push_back(absl::StrCat(where, ": no such flag ", name));
      } else if (it->second && arg.find('=') == std::string::npos) {
        ++i;  // its value
      }
    } else if (auto sub = spec->subcommands.find(arg); sub != spec->subcommands.end()) {
      spec = &sub->second;
      absl::StrAppend(&where, " ", arg);
    }
  }
  return problems;
}

bool RunsKtune(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  const std::string name = std::filesystem::path(argv[0]).filename().string();
  return name == "ktune" || name == "ktuned";
}

// All problems with ktune/ktuned invocations in shell `text`.
std::vector<std::string> CheckShell(const std::string& text) {
  std::vector<std::string> problems;
  for (const std::vector<std::string>& argv : ShellCommands(text)) {
    if (!RunsKtune(argv)) continue;
    for (std::string& p : CheckInvocation(argv)) problems.push_back(std::move(p));
  }
  return problems;
}

std::vector<std::string> StringList(const YAML::Node& node) {
  std::vector<std::string> out;
  if (node && node.IsSequence()) {
    for (const YAML::Node& n : node) out.push_back(n.as<std::string>());
  }
  return out;
}

// The argvs a container runs: command + args, and each exec probe. A shell
// ("sh -c SCRIPT") contributes the commands of its script.
std::vector<std::string> CheckContainer(const YAML::Node& container) {
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::string> main = StringList(container["command"]);
  for (std::string& a : StringList(container["args"])) main.push_back(std::move(a));
  argvs.push_back(main);
  for (const char* probe : {"startupProbe", "readinessProbe", "livenessProbe"}) {
    if (container[probe] && container[probe]["exec"]) {
      argvs.push_back(StringList(container[probe]["exec"]["command"]));
    }
  }
  std::vector<std::string> problems;
  for (const std::vector<std::string>& argv : argvs) {
    if (argv.size() >= 3 && (argv[0] == "/bin/sh" || argv[0] == "sh" || argv[0] == "/bin/bash") && argv[1] == "-c") {
      for (std::string& p : CheckShell(argv[2])) problems.push_back(std::move(p));
    } else if (RunsKtune(argv)) {
      for (std::string& p : CheckInvocation(argv)) problems.push_back(std::move(p));
    }
  }
  return problems;
}

std::vector<YAML::Node> Containers(const YAML::Node& doc) {
  std::vector<YAML::Node> out;
  // Only workloads have a pod template (a missing key is an invalid node, and
  // indexing into one throws, so each level is checked).
  const YAML::Node spec = doc["spec"];
  if (!spec || !spec.IsMap() || !spec["template"] || !spec["template"]["spec"]) return out;
  const YAML::Node pod = spec["template"]["spec"];
  for (const char* list : {"initContainers", "containers"}) {
    if (pod[list]) {
      for (const YAML::Node& c : pod[list]) out.push_back(c);
    }
  }
  return out;
}

std::vector<std::filesystem::path> Manifests() {
  std::vector<std::filesystem::path> out;
  for (const auto& f : std::filesystem::directory_iterator(kDeploy / "k8s")) {
    if (f.path().extension() == ".yaml" || f.path().extension() == ".yml") out.push_back(f.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The JSON-array argv of a Dockerfile instruction such as ENTRYPOINT ["a", "b"].
std::vector<std::string> DockerArgv(const std::string& dockerfile, const std::string& instruction) {
  // Join continuation lines first, then parse the instruction's JSON array as YAML.
  std::string joined = std::regex_replace(dockerfile, std::regex(R"(\\\n\s*)"), " ");
  std::smatch m;
  if (!std::regex_search(joined, m, std::regex("(^|\\n)" + instruction + R"(\s+(\[.*\]))"))) return {};
  return StringList(YAML::Load(m[2].str()));
}

// ------------------------------------------------------------ tests

TEST_CASE("every Kubernetes manifest parses and has the workloads deploy/ promises", "[deploy]") {
  const std::vector<std::filesystem::path> files = Manifests();
  REQUIRE(files.size() >= 4);
  std::map<std::string, YAML::Node> by_kind_name;
  for (const auto& path : files) {
    INFO(path.string());
    std::vector<YAML::Node> docs;
    REQUIRE_NOTHROW(docs = YAML::LoadAllFromFile(path.string()));
    REQUIRE_FALSE(docs.empty());
    for (const YAML::Node& doc : docs) {
      REQUIRE(doc.IsMap());
      CHECK(doc["apiVersion"].IsScalar());
      REQUIRE(doc["kind"].IsScalar());
      REQUIRE(doc["metadata"]["name"].IsScalar());
      by_kind_name[doc["kind"].as<std::string>() + "/" + doc["metadata"]["name"].as<std::string>()] = doc;
    }
  }
  REQUIRE(by_kind_name.count("DaemonSet/ktuned"));
  const YAML::Node ds = by_kind_name["DaemonSet/ktuned"];
  const YAML::Node ktuned = ds["spec"]["template"]["spec"]["containers"][0];
  CHECK(ktuned["resources"]["limits"]["nvidia.com/gpu"].as<int>() == 1);
  CHECK(ktuned["readinessProbe"]["exec"]);
  const std::vector<std::string> args = StringList(ktuned["args"]);
  CHECK(std::find(args.begin(), args.end(), "--import-bundle") != args.end());

  REQUIRE(by_kind_name.count("Job/ktune-prewarm"));
  const YAML::Node job = by_kind_name["Job/ktune-prewarm"];
  CHECK(job["spec"]["completionMode"].as<std::string>() == "Indexed");
  const int completions = job["spec"]["completions"].as<int>();
  const std::string script = StringList(job["spec"]["template"]["spec"]["containers"][0]["command"]).at(2);
  CHECK(script.find("prewarm --shard \"$JOB_COMPLETION_INDEX/" + std::to_string(completions) + "\"") !=
        std::string::npos);
  CHECK(script.find(" export ") != std::string::npos);

  REQUIRE(by_kind_name.count("ConfigMap/ktune-shapes"));
  const YAML::Node shapes = YAML::Load(by_kind_name["ConfigMap/ktune-shapes"]["data"]["shapes.yaml"].as<std::string>());
  CHECK(shapes["problems"].IsSequence());
}

TEST_CASE("the DaemonSet's ktuned arguments start a daemon", "[deploy][e2e]") {
  // Flags that exist can still be refused together (a metrics address beyond
  // loopback without --metrics-allow-remote): start ktuned with the
  // manifest's own arguments, its paths moved into a scratch directory.
  TempDir dir;
  YAML::Node ktuned;
  for (const YAML::Node& doc : YAML::LoadAllFromFile((kDeploy / "k8s" / "daemonset.yaml").string())) {
    if (doc["kind"].as<std::string>() == "DaemonSet") ktuned = doc["spec"]["template"]["spec"]["containers"][0];
  }
  REQUIRE(ktuned);
  std::string command = testing::KtunedPath();
  std::string socket;
  const std::vector<std::string> args = StringList(ktuned["args"]);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    for (const char* prefix :
         {"/run/ktune", "/var/lib/ktune", "/var/cache/ktune", "/bundles", "/etc/ktune/fleet-store"}) {
      const size_t at = arg.find(prefix);
      if (at != std::string::npos) arg.replace(at, std::strlen(prefix), dir.path() + prefix);
    }
    if (absl::EndsWith(arg, ":9477")) arg = absl::StrCat("0.0.0.0:", testing::FreeTcpPort());
    // The store down (nothing listens there) must not stop the start.
    if (absl::StartsWith(arg, "postgresql://")) {
      arg = std::regex_replace(arg, std::regex("@[^/]*/"), absl::StrCat("@127.0.0.1:", testing::FreeTcpPort(), "/"));
    }
    if (absl::StartsWith(arg, "unix:")) socket = arg;
    absl::StrAppend(&command, " '", arg, "'");
  }
  REQUIRE_FALSE(socket.empty());
  std::filesystem::create_directories(dir.path() + "/etc/ktune/fleet-store");
  std::ofstream(dir.path() + "/etc/ktune/fleet-store/password") << "not-the-real-password\n";
  std::filesystem::create_directories(dir.path() + "/run/ktune");
  std::filesystem::permissions(dir.path() + "/run/ktune", std::filesystem::perms::owner_all);
  const CommandResult run = RunCommand(
      absl::StrCat(command, " & pid=$!; ok=1; for i in $(seq 100); do ", std::string(KTUNE_CLI_PATH), " --server ",
                   socket, " status >/dev/null 2>&1 && { ok=0; break; }; sleep 0.1; done; kill -TERM $pid; ",
                   "wait $pid; exit $ok"),
      dir.path());
  INFO(run.err);
  CHECK(run.exit_code == 0);
}

TEST_CASE("the flag check reads the binaries' grammar and catches a flag that does not exist", "[deploy]") {
  CHECK(CheckShell("ktuned --db /x --listen unix:/s --import-bundle /b").empty());
  CHECK(CheckShell("ktune --server unix:/s --timeout 3 status").empty());
  CHECK(CheckShell("ktune bundle merge a b -o c --policy keep-faster && ktune import --dry-run f").empty());
  CHECK(CheckShell("ktuned --no-such-flag 1") == std::vector<std::string>{"ktuned: no such flag --no-such-flag"});
  // A flag of another subcommand is still wrong here.
  CHECK(CheckShell("ktune status --policy keep-faster") ==
        std::vector<std::string>{"ktune status: no such flag --policy"});
  CHECK(CheckShell("echo x; /usr/local/bin/ktune export --gpu 'NVIDIA H200' --bogus -o f") ==
        std::vector<std::string>{"ktune export: no such flag --bogus"});
}

TEST_CASE("every ktuned and ktune flag used in deploy/ exists", "[deploy]") {
  int invocations = 0;
  auto check = [&](const std::string& where, const std::vector<std::string>& problems) {
    ++invocations;
    for (const std::string& p : problems) FAIL_CHECK(where << ": " << p);
  };
  for (const auto& path : Manifests()) {
    for (const YAML::Node& doc : YAML::LoadAllFromFile(path.string())) {
      for (const YAML::Node& c : Containers(doc)) check(path.filename().string(), CheckContainer(c));
    }
  }
  const std::string unit = Slurp(kDeploy / "systemd" / "ktuned.service");
  std::smatch exec;
  REQUIRE(std::regex_search(unit, exec, std::regex(R"(ExecStart=((.*\\\n)*.*))")));
  REQUIRE(exec[1].str().find("ktuned") != std::string::npos);
  check("ktuned.service", CheckShell(exec[1].str()));

  const std::string dockerfile = Slurp(kDeploy / "container" / "Dockerfile");
  std::vector<std::string> entry = DockerArgv(dockerfile, "ENTRYPOINT");
  REQUIRE(!entry.empty());
  for (std::string& a : DockerArgv(dockerfile, "CMD")) entry.push_back(std::move(a));
  check("Dockerfile ENTRYPOINT+CMD", CheckInvocation(entry));
  const std::vector<std::string> health = DockerArgv(dockerfile, "HEALTHCHECK[^\\n]*\\n?\\s*CMD");
  if (!health.empty()) check("Dockerfile HEALTHCHECK", CheckInvocation(health));
  CHECK(invocations >= 7);  // 4 containers, the unit, ENTRYPOINT+CMD, HEALTHCHECK
}

TEST_CASE("the systemd unit is a hardened Type=notify service", "[deploy]") {
  const std::string unit = Slurp(kDeploy / "systemd" / "ktuned.service");
  for (const char* line :
       {"Type=notify", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
        "RuntimeDirectory=ktune", "RuntimeDirectoryMode=0750", "StateDirectory=ktune", "CacheDirectory=ktune",
        "DeviceAllow=/dev/nvidiactl rw", "DevicePolicy=closed"}) {
    INFO(line);
    CHECK(std::regex_search(unit, std::regex(std::string("(^|\\n)") + line + "\\s*(\\n|$)")));
  }
  CHECK(DockerArgv(Slurp(kDeploy / "container" / "Dockerfile"), "ENTRYPOINT") ==
        std::vector<std::string>{"/usr/local/bin/ktuned"});
  CHECK(std::regex_search(Slurp(kDeploy / "container" / "Dockerfile"),
                          std::regex(R"(FROM nvidia/cuda:\$\{CUDA_VERSION\}-runtime-ubuntu24\.04)")));
}

// A datagram socket standing in for systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv{20, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~NotifySocket() { close(fd_); }
  bool bound() const { return bound_; }
  // The next message, or "" after 20 s.
  std::string Receive() {
    char buf[512];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

TEST_CASE("ktuned tells systemd it is ready once serving, and that it is stopping", "[deploy][e2e]") {
  TempDir dir;
  NotifySocket notify(dir.path() + "/notify.sock");
  REQUIRE(notify.bound());
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {"NOTIFY_SOCKET=" + dir.path() + "/notify.sock"}));
  const std::string ready = notify.Receive();
  CHECK(ready.find("READY=1") != std::string::npos);
  REQUIRE(daemon.Stop() == 0);
  CHECK(notify.Receive().find("STOPPING=1") != std::string::npos);
}

}  // namespace
}  // namespace ktune
