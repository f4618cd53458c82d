#include "daemon/metrics.h"

#include <cerrno>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace ktune {

std::string Metrics::LabelKey(const std::string& name, const std::string& value) {
  if (name.empty()) return "";
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return absl::StrCat(name, "=\"", escaped, "\"");
}

void Metrics::Declare(const std::string& family, Kind kind, const std::string& help) {
  absl::MutexLock lock(&mu_);
  Family& f = families_[family];
  f.kind = kind;
  f.help = help;
}

void Metrics::Update(const std::string& family, const std::string& label_name,
                     const std::string& label_value, const std::function<void(double&)>& change) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(family);
  if (it == families_.end()) {
    spdlog::error("event=undeclared_metric family={}", family);
    return;
  }
  change(it->second.samples[LabelKey(label_name, label_value)]);
}

void Metrics::Add(const std::string& family, double value, const std::string& label_name,
                  const std::string& label_value) {
  Update(family, label_name, label_value, [value](double& sample) { sample += value; });
}

void Metrics::Set(const std::string& family, double value, const std::string& label_name,
                  const std::string& label_value) {
  Update(family, label_name, label_value, [value](double& sample) { sample = value; });
}

std::map<std::string, double> Metrics::Snapshot() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, double> out;
  for (const auto& [name, family] : families_) {
    for (const auto& [labels, value] : family.samples) {
      out[labels.empty() ? name : absl::StrCat(name, "{", labels, "}")] = value;
    }
  }
  return out;
}

std::string Metrics::RenderPrometheus() {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", family.help, "\n# TYPE ", name, " ",
                    family.kind == Kind::kCounter ? "counter" : "gauge", "\n");
    if (family.samples.empty()) absl::StrAppend(&out, name, " 0\n");
    for (const auto& [labels, value] : family.samples) {
      absl::StrAppend(&out, name, labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ",
                      value, "\n");
    }
  }
  return out;
}

struct MetricsServer::Impl {
  httplib::Server http;
  std::thread thread;
};

MetricsServer::MetricsServer() = default;
MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start(const std::string& host_port, Metrics* metrics,
                                  std::function<void()> refresh) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen ", host_port, ": expected host:port with a port in [1, 65535]"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  impl_ = std::make_unique<Impl>();
  impl_->http.Get("/metrics", [metrics, refresh](const httplib::Request&, httplib::Response& res) {
    if (refresh) refresh();
    res.set_content(metrics->RenderPrometheus(), "text/plain; version=0.0.4");
  });
  // httplib sets SO_REUSEPORT, which lets a second daemon share the port and
  // take half the scrapes; SO_REUSEADDR alone still rebinds after a restart.
  impl_->http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (!impl_->http.bind_to_port(host.c_str(), port)) {
    const int bind_errno = errno;
    impl_.reset();
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", host_port, ": ",
                                               bind_errno == EADDRINUSE ? "address already in use"
                                                                        : "cannot bind"));
  }
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  if (!impl_) return;
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace ktune
