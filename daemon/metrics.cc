#include "daemon/metrics.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace ktune {

void Metrics::Sample::Add(double delta) {
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

Metrics::Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Metrics::Histogram::Observe(double value) {
  // The first bound >= value; past the end is the +Inf bucket.
  const size_t bucket = std::lower_bound(bounds_->begin(), bounds_->end(), value) - bounds_->begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.Add(value);
}

std::vector<uint64_t> Metrics::Histogram::Cumulative() const {
  std::vector<uint64_t> out(bounds_->size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

std::string Metrics::LabelKey(const Labels& labels) {
  std::string key;
  for (const auto& [name, value] : labels) {
    if (!key.empty()) key += ',';
    absl::StrAppend(&key, name, "=\"");
    for (char c : value) {
      if (c == '\\' || c == '"') key += '\\';
      if (c == '\n') {
        key += "\\n";
        continue;
      }
      key += c;
    }
    key += '"';
  }
  return key;
}

void Metrics::Declare(const std::string& family, Kind kind, const std::string& help) {
  absl::MutexLock lock(&mu_);
  Family& f = families_[family];
  f.kind = kind;
  f.help = help;
}

void Metrics::DeclareHistogram(const std::string& family, const std::string& help, std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  absl::MutexLock lock(&mu_);
  Family& f = families_[family];
  f.kind = Kind::kHistogram;
  f.help = help;
  f.bounds = std::move(bounds);
}

Metrics::Sample* Metrics::Get(const std::string& family, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(family);
  if (it == families_.end() || it->second.kind == Kind::kHistogram) {
    spdlog::error("event=undeclared_metric family={}", family);
    return &undeclared_;
  }
  std::unique_ptr<Sample>& sample = it->second.samples[LabelKey(labels)];
  if (sample == nullptr) sample = std::make_unique<Sample>();
  return sample.get();
}

Metrics::Histogram* Metrics::GetHistogram(const std::string& family, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(family);
  if (it == families_.end() || it->second.kind != Kind::kHistogram) {
    spdlog::error("event=undeclared_metric family={}", family);
    return &undeclared_histogram_;
  }
  std::unique_ptr<Histogram>& histogram = it->second.histograms[LabelKey(labels)];
  if (histogram == nullptr) histogram = std::make_unique<Histogram>(&it->second.bounds);
  return histogram.get();
}

namespace {
Metrics::Labels OneLabel(const std::string& name, const std::string& value) {
  if (name.empty()) return {};
  return {{name, value}};
}
}  // namespace

void Metrics::Add(const std::string& family, double value, const std::string& label_name,
                  const std::string& label_value) {
  Get(family, OneLabel(label_name, label_value))->Add(value);
}

void Metrics::Set(const std::string& family, double value, const std::string& label_name,
                  const std::string& label_value) {
  Get(family, OneLabel(label_name, label_value))->Set(value);
}

namespace {
// `name{labels}`, `name{labels,extra}`, or plain `name`.
std::string SampleName(const std::string& name, const std::string& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return name;
  return absl::StrCat(name, "{", labels, !labels.empty() && !extra.empty() ? "," : "", extra, "}");
}
}  // namespace

std::map<std::string, double> Metrics::Snapshot() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, double> out;
  for (const auto& [name, family] : families_) {
    for (const auto& [labels, sample] : family.samples) out[SampleName(name, labels)] = sample->value();
    for (const auto& [labels, histogram] : family.histograms) {
      out[SampleName(name + "_count", labels)] = static_cast<double>(histogram->Cumulative().back());
      out[SampleName(name + "_sum", labels)] = histogram->sum();
    }
  }
  return out;
}

std::string Metrics::RenderPrometheus() {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    const char* type = family.kind == Kind::kCounter ? "counter" : family.kind == Kind::kGauge ? "gauge" : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", family.help, "\n# TYPE ", name, " ", type, "\n");
    if (family.kind != Kind::kHistogram && family.samples.empty()) absl::StrAppend(&out, name, " 0\n");
    for (const auto& [labels, sample] : family.samples) {
      absl::StrAppend(&out, SampleName(name, labels), " ", sample->value(), "\n");
    }
    for (const auto& [labels, histogram] : family.histograms) {
      // Read once, so the buckets, +Inf and _count agree even while observed.
      const std::vector<uint64_t> cumulative = histogram->Cumulative();
      for (size_t i = 0; i < cumulative.size(); ++i) {
        const std::string le = i < family.bounds.size() ? absl::StrCat("le=\"", family.bounds[i], "\"") : "le=\"+Inf\"";
        absl::StrAppend(&out, SampleName(name + "_bucket", labels, le), " ", cumulative[i], "\n");
      }
      absl::StrAppend(&out, SampleName(name + "_sum", labels), " ", histogram->sum(), "\n");
      absl::StrAppend(&out, SampleName(name + "_count", labels), " ", cumulative.back(), "\n");
    }
  }
  return out;
}

namespace {

// httplib runs each accepted connection as one task. This pool serves them on
// a few threads and holds at most `limit` connections (queued or being
// served): when full, the accepting thread waits for a slot, so further
// connections wait in the kernel's listen backlog instead of piling up here.
class ConnectionPool {
 public:
  ConnectionPool(int threads, int limit) : limit_(limit) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~ConnectionPool() { Shutdown(); }

  void Enqueue(std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mu_);
    slot_free_.wait(lock, [this] { return held_ < limit_ || draining_; });
    ++held_;
    jobs_.push_back(std::move(fn));
    job_ready_.notify_one();
  }

  // The server is stopping: Enqueue no longer waits for a slot.
  void Drain() {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    slot_free_.notify_all();
  }

  // Serves (closes) what is queued, then joins the threads.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      draining_ = stopping_ = true;
    }
    job_ready_.notify_all();
    slot_free_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        job_ready_.wait(lock, [this] { return !jobs_.empty() || stopping_; });
        if (jobs_.empty()) return;  // stopping, and every socket closed
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();  // serves the connection and closes it
      std::lock_guard<std::mutex> lock(mu_);
      --held_;
      slot_free_.notify_one();
    }
  }

  const int limit_;
  std::mutex mu_;
  std::condition_variable job_ready_, slot_free_;
  std::deque<std::function<void()>> jobs_;
  int held_ = 0;  // queued + being served
  bool draining_ = false, stopping_ = false;
  std::vector<std::thread> threads_;
};

// What httplib owns (and deletes) as its task queue: a view of the pool,
// which MetricsServer owns so that Stop() can reach it at any time.
class PoolTaskQueue : public httplib::TaskQueue {
 public:
  explicit PoolTaskQueue(ConnectionPool* pool) : pool_(pool) {}
  void enqueue(std::function<void()> fn) override { pool_->Enqueue(std::move(fn)); }
  void shutdown() override { pool_->Shutdown(); }

 private:
  ConnectionPool* const pool_;
};

}  // namespace

struct MetricsServer::Impl {
  ConnectionPool pool{/*threads=*/4, kMaxMetricsConnections};
  httplib::Server http;  // after pool: destroyed first
  std::thread thread;
};

MetricsServer::MetricsServer() = default;
MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start(const std::string& host_port, Metrics* metrics, std::function<void()> refresh) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen ", host_port, ": expected host:port with a port in [1, 65535]"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  impl_ = std::make_unique<Impl>();
  Impl* impl = impl_.get();
  impl->http.Get("/metrics", [metrics, refresh](const httplib::Request&, httplib::Response& res) {
    if (refresh) refresh();
    res.set_content(metrics->RenderPrometheus(), "text/plain; version=0.0.4");
  });
  // A scrape is one small GET: bound everything a client could hold open.
  impl->http.set_read_timeout(2, 0);
  impl->http.set_write_timeout(2, 0);
  // A worker waits ~10 ms (httplib's poll step) for the next request on a
  // kept-alive connection: scrapes are seconds apart, so keeping it would
  // only let idle connections hold workers.
  impl->http.set_keep_alive_timeout(0);
  impl->http.set_payload_max_length(4096);
  impl->http.new_task_queue = [impl] { return new PoolTaskQueue(&impl->pool); };
  impl->http.set_socket_options([](socket_t sock) {
    // httplib sets SO_REUSEPORT, which lets a second daemon share the port and
    // take half the scrapes; SO_REUSEADDR alone still rebinds after a restart.
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    // accept() returns a connection only once its request has arrived (or
    // after ~2 s, when the keep-alive poll above then closes it in ~10 ms):
    // a client that connects and sends nothing occupies no worker.
    int defer_s = 2;
    setsockopt(sock, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s));
  });
  if (!impl->http.bind_to_port(host.c_str(), port)) {
    const int bind_errno = errno;
    impl_.reset();
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", host_port, ": ",
                                               bind_errno == EADDRINUSE ? "address already in use" : "cannot bind"));
  }
  impl->thread = std::thread([impl] { impl->http.listen_after_bind(); });
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  if (!impl_) return;
  impl_->pool.Drain();  // an accept waiting for a slot must see the stop
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace ktune
