// The merge of bundles into stores and into each other (cache/bundle_merge.h):
// each policy and its report, the compatibility classes, and the offline merge.
#include "cache/bundle_merge.h"

#include <catch2/catch.hpp>
#include <map>

#include "tests/cache/test_entries.h"
#include "tuner/builtin_ops.h"

namespace ktune {
namespace {

using testutil::MakeTestEntry;

v1::Entry Timed(int64_t m, double time_us) {
  v1::Entry e = MakeTestEntry(m);
  e.mutable_measurement()->set_time_us(time_us);
  return e;
}

// A store of entries by key, as ExistingLookup sees it.
struct FakeStore {
  std::map<std::string, v1::Entry> entries;
  void Put(const v1::Entry& e) { entries[FlatKey(*KeyOf(BuiltinOps(), e))] = e; }
  ExistingLookup Lookup() const {
    return [this](const EntryKey& key) -> std::optional<v1::Entry> {
      auto it = entries.find(FlatKey(key));
      if (it == entries.end()) return std::nullopt;
      return it->second;
    };
  }
};

// A GPU target equal to MakeTestEntry's device and software.
MergeTarget H200Target() {
  MergeTarget t;
  t.devices = {MakeTestEntry().device()};
  t.software_for = [](const v1::Entry&) -> absl::StatusOr<v1::SoftwareFingerprint> {
    return MakeTestEntry().software();
  };
  return t;
}

const v1::MergeDecision& Only(const MergePlan& plan) {
  REQUIRE(plan.report.decisions_size() == 1);
  return plan.report.decisions(0);
}

TEST_CASE("each merge policy decides a taken key and says why", "[cache][merge]") {
  FakeStore store;
  store.Put(Timed(4096, 20.0));
  const MergeTarget target = H200Target();

  struct Case {
    v1::MergePolicy policy;
    double incoming_us;
    std::string action;
    std::string reason_has;
  };
  const std::vector<Case> cases = {
      {v1::KEEP_FASTER, 15.0, "replaced", "keep-faster: bundled 15.00 us < stored 20.00 us"},
      {v1::KEEP_FASTER, 25.0, "kept", "keep-faster: stored 20.00 us <= bundled 25.00 us"},
      {v1::MERGE_POLICY_UNSPECIFIED, 15.0, "replaced", "keep-faster"},
      {v1::PREFER_INCOMING, 25.0, "replaced", "prefer-incoming"},
      {v1::PREFER_EXISTING, 15.0, "kept", "prefer-existing"},
  };
  for (const Case& c : cases) {
    INFO(MergePolicyName(c.policy) << " incoming " << c.incoming_us);
    auto plan = PlanMerge(BuiltinOps(), {Timed(4096, c.incoming_us)}, c.policy, target, store.Lookup());
    REQUIRE(plan.ok());
    const v1::MergeDecision& d = Only(*plan);
    CHECK(d.action() == c.action);
    CHECK(d.reason().find(c.reason_has) != std::string::npos);
    CHECK(d.compatibility() == "exact");
    CHECK(d.op() == "rmsnorm.fwd");
    CHECK(d.device_name() == "NVIDIA H200");
    CHECK(plan->writes.size() == (c.action == "replaced" ? 1u : 0u));
    CHECK(plan->report.replaced() == (c.action == "replaced" ? 1 : 0));
    CHECK(plan->report.kept() == (c.action == "kept" ? 1 : 0));
  }

  SECTION("a tie keeps the stored entry, so re-imports never flip the store") {
    v1::Entry same_time = Timed(4096, 20.0);
    same_time.set_candidates_measured(7);  // differs, but not faster
    auto plan = PlanMerge(BuiltinOps(), {same_time}, v1::KEEP_FASTER, target, store.Lookup());
    REQUIRE(plan.ok());
    CHECK(Only(*plan).action() == "kept");
  }

  SECTION("keep-faster does not compare a sustained time with an interleaved one") {
    v1::Entry sustained = Timed(4096, 15.0);
    sustained.mutable_measurement()->set_sustained(true);
    auto plan = PlanMerge(BuiltinOps(), {sustained}, v1::KEEP_FASTER, target, store.Lookup());
    REQUIRE(plan.ok());
    CHECK(Only(*plan).action() == "kept");
    CHECK(Only(*plan).reason() ==
          "keep-faster: stored 20.00 us (interleaved) and bundled 15.00 us (sustained) are of two protocols, "
          "not compared");
    CHECK(plan->writes.empty());
    // Of one protocol, they are compared again.
    FakeStore sustained_store;
    v1::Entry stored = Timed(4096, 20.0);
    stored.mutable_measurement()->set_sustained(true);
    sustained_store.Put(stored);
    plan = PlanMerge(BuiltinOps(), {sustained}, v1::KEEP_FASTER, target, sustained_store.Lookup());
    REQUIRE(plan.ok());
    CHECK(Only(*plan).action() == "replaced");
  }

  SECTION("an identical entry is unchanged under every policy") {
    for (v1::MergePolicy p : {v1::KEEP_FASTER, v1::PREFER_INCOMING, v1::PREFER_EXISTING}) {
      auto plan = PlanMerge(BuiltinOps(), {Timed(4096, 20.0)}, p, target, store.Lookup());
      REQUIRE(plan.ok());
      CHECK(Only(*plan).action() == "unchanged");
      CHECK(plan->report.unchanged() == 1);
      CHECK(plan->writes.empty());
    }
  }

  SECTION("a new key is added") {
    auto plan = PlanMerge(BuiltinOps(), {Timed(8192, 30.0)}, v1::PREFER_EXISTING, target, store.Lookup());
    REQUIRE(plan.ok());
    CHECK(Only(*plan).action() == "added");
    CHECK(plan->report.added() == 1);
    REQUIRE(plan->writes.size() == 1);
    CHECK(plan->writes[0].problem().norm().m() == 8192);
  }
}

TEST_CASE("compatibility is judged against the target's GPU and software", "[cache][merge]") {
  const v1::Entry exact = MakeTestEntry();
  const v1::DeviceFingerprint here = exact.device();
  const v1::SoftwareFingerprint software = exact.software();

  SECTION("same device and software: exact") {
    CHECK(JudgeCompatibility(exact, here, software).compatibility == Compatibility::kExact);
  }
  SECTION("another driver: compatible, stored under this device, needs revalidation") {
    v1::Entry other = exact;
    other.mutable_device()->set_driver_version(12040);
    const CompatibilityVerdict v = JudgeCompatibility(other, here, software);
    CHECK(v.compatibility == Compatibility::kCompatible);
    CHECK(v.reason.find("driver 12040 in bundle, 13000 here") != std::string::npos);

    auto plan = PlanMerge(BuiltinOps(), {other}, v1::KEEP_FASTER, H200Target(), FakeStore().Lookup());
    REQUIRE(plan.ok());
    CHECK(Only(*plan).action() == "added");
    CHECK(Only(*plan).compatibility() == "compatible");
    CHECK(Only(*plan).reason().find("needs revalidation") != std::string::npos);
    REQUIRE(plan->writes.size() == 1);
    CHECK(plan->writes[0].device().driver_version() == 13000);
    CHECK(plan->writes[0].needs_revalidation());
  }
  SECTION("another GPU kind, architecture or software: incompatible, rejected with the reason") {
    std::vector<std::pair<v1::Entry, std::string>> cases;
    v1::Entry kind = exact;
    kind.mutable_device()->set_name("NVIDIA H100 80GB HBM3");
    cases.push_back({kind, "another GPU kind"});
    v1::Entry sms = exact;
    sms.mutable_device()->set_sm_count(114);
    cases.push_back({sms, "another architecture"});
    v1::Entry tpl = exact;
    tpl.mutable_software()->set_template_hash(std::string(64, 'b'));
    tpl.mutable_recipe()->set_template_hash(std::string(64, 'b'));
    cases.push_back({tpl, "another software fingerprint: template hash bbbbbbbbbbbb"});
    v1::Entry nvrtc = exact;
    nvrtc.mutable_software()->set_nvrtc_version(12080);
    cases.push_back({nvrtc, "NVRTC 12080 in bundle, 13000 here"});
    for (const auto& [entry, reason] : cases) {
      INFO(reason);
      const CompatibilityVerdict v = JudgeCompatibility(entry, here, software);
      CHECK(v.compatibility == Compatibility::kIncompatible);
      CHECK(v.reason.find(reason) != std::string::npos);
      auto plan = PlanMerge(BuiltinOps(), {entry}, v1::PREFER_INCOMING, H200Target(), FakeStore().Lookup());
      REQUIRE(plan.ok());
      CHECK(Only(*plan).action() == "rejected");
      CHECK(Only(*plan).compatibility() == "incompatible");
      CHECK(Only(*plan).reason().find(reason) != std::string::npos);
      CHECK(plan->report.rejected() == 1);
      CHECK(plan->writes.empty());
    }
  }
  SECTION("a target of two GPU kinds: an entry of either is exact, a driver away is stored under its kind") {
    MergeTarget two = H200Target();
    v1::DeviceFingerprint h100 = exact.device();
    h100.set_name("NVIDIA H100 80GB HBM3");
    h100.set_sm_count(132);
    two.devices.insert(two.devices.begin(), h100);  // the H200 is not the first kind
    v1::Entry h200_other_driver = exact;
    h200_other_driver.mutable_device()->set_driver_version(12040);
    v1::Entry h100_entry = exact;
    *h100_entry.mutable_device() = h100;
    v1::Entry b200 = exact;
    b200.mutable_device()->set_name("NVIDIA B200");
    auto plan = PlanMerge(BuiltinOps(), {exact, h100_entry, h200_other_driver, b200}, v1::PREFER_INCOMING, two,
                          FakeStore().Lookup());
    REQUIRE(plan.ok());
    REQUIRE(plan->report.decisions_size() == 4);
    CHECK(plan->report.decisions(0).compatibility() == "exact");
    CHECK(plan->report.decisions(1).compatibility() == "exact");
    CHECK(plan->report.decisions(2).compatibility() == "compatible");
    CHECK(plan->report.decisions(3).compatibility() == "incompatible");
    CHECK(plan->report.decisions(3).reason().find("none of this daemon's 2 GPU kinds fits") != std::string::npos);
    // exact and its other-driver copy land on one key (the H200's); the H100's has its own.
    REQUIRE(plan->writes.size() == 2);
    CHECK(plan->writes[0].device().name() == exact.device().name());
    CHECK(plan->writes[0].device().driver_version() == exact.device().driver_version());
    CHECK(plan->writes[1].device().name() == "NVIDIA H100 80GB HBM3");
  }
  SECTION("an op the target cannot key is rejected with the target's reason") {
    MergeTarget target = H200Target();
    target.software_for = [](const v1::Entry&) -> absl::StatusOr<v1::SoftwareFingerprint> {
      return absl::NotFoundError("no template norm/rmsnorm_fwd");
    };
    auto plan = PlanMerge(BuiltinOps(), {exact}, v1::KEEP_FASTER, target, FakeStore().Lookup());
    REQUIRE(plan.ok());
    CHECK(Only(*plan).action() == "rejected");
    CHECK(Only(*plan).reason() == "no template norm/rmsnorm_fwd");
  }
  SECTION("no GPU: stored as bundled and said so") {
    v1::Entry other = exact;
    other.mutable_device()->set_name("NVIDIA B200");
    MergeTarget none;
    none.not_judged_note = "compile-only daemon";
    auto plan = PlanMerge(BuiltinOps(), {other}, v1::KEEP_FASTER, none, FakeStore().Lookup());
    REQUIRE(plan.ok());
    CHECK(Only(*plan).action() == "added");
    CHECK(Only(*plan).compatibility() == "not_judged");
    CHECK(Only(*plan).reason().find("compile-only daemon") != std::string::npos);
    REQUIRE(plan->writes.size() == 1);
    CHECK(plan->writes[0].device().name() == "NVIDIA B200");
    CHECK_FALSE(plan->writes[0].needs_revalidation());
  }
}

TEST_CASE("two bundled drivers of one GPU meet on one key by the policy", "[cache][merge]") {
  v1::Entry exact = Timed(4096, 20.0);
  v1::Entry other_driver = Timed(4096, 18.0);
  other_driver.mutable_device()->set_driver_version(12040);
  auto plan = PlanMerge(BuiltinOps(), {exact, other_driver}, v1::KEEP_FASTER, H200Target(), FakeStore().Lookup());
  REQUIRE(plan.ok());
  REQUIRE(plan->report.decisions_size() == 2);
  CHECK(plan->report.decisions(0).action() == "added");
  CHECK(plan->report.decisions(1).action() == "replaced");
  REQUIRE(plan->writes.size() == 1);  // one write per key
  CHECK(plan->writes[0].measurement().time_us() == 18.0);
  CHECK(plan->writes[0].needs_revalidation());
}

TEST_CASE("a plan refuses invalid entries and unknown policies", "[cache][merge]") {
  v1::Entry bad = MakeTestEntry();
  bad.mutable_measurement()->set_time_us(-1);
  auto plan = PlanMerge(BuiltinOps(), {MakeTestEntry(), bad}, v1::KEEP_FASTER, MergeTarget(), nullptr);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message().find("entry 1: measurement.time_us") != std::string::npos);
  auto policy = PlanMerge(BuiltinOps(), {}, static_cast<v1::MergePolicy>(42), MergeTarget(), nullptr);
  CHECK_FALSE(policy.ok());
  CHECK_FALSE(ParseMergePolicy("fastest").ok());
  CHECK(*ParseMergePolicy("prefer-existing") == v1::PREFER_EXISTING);
}

TEST_CASE("offline merge of several bundles by policy, with a report naming each input", "[cache][merge]") {
  const std::vector<NamedEntries> inputs = {
      {"a.ktb", {Timed(1024, 10.0), Timed(2048, 20.0)}},
      {"b.ktb", {Timed(2048, 15.0), Timed(4096, 40.0)}},
      {"c.ktb", {Timed(1024, 12.0), Timed(4096, 40.0)}},
  };
  SECTION("keep-faster") {
    auto merged = MergeOffline(BuiltinOps(), inputs, v1::KEEP_FASTER);
    REQUIRE(merged.ok());
    REQUIRE(merged->entries.size() == 3);
    std::map<int64_t, double> times;
    for (const v1::Entry& e : merged->entries) times[e.problem().norm().m()] = e.measurement().time_us();
    CHECK(times == std::map<int64_t, double>{{1024, 10.0}, {2048, 15.0}, {4096, 40.0}});
    CHECK(merged->report.added() == 3);
    CHECK(merged->report.replaced() == 1);
    CHECK(merged->report.kept() == 1);
    CHECK(merged->report.unchanged() == 1);
    REQUIRE(merged->report.decisions_size() == 6);
    CHECK(merged->report.decisions(2).reason().rfind("b.ktb: keep-faster", 0) == 0);
    CHECK(merged->report.decisions(2).compatibility() == "not_judged");
  }
  SECTION("prefer-incoming: the last input wins") {
    auto merged = MergeOffline(BuiltinOps(), inputs, v1::PREFER_INCOMING);
    REQUIRE(merged.ok());
    std::map<int64_t, double> times;
    for (const v1::Entry& e : merged->entries) times[e.problem().norm().m()] = e.measurement().time_us();
    CHECK(times == std::map<int64_t, double>{{1024, 12.0}, {2048, 15.0}, {4096, 40.0}});
  }
  SECTION("prefer-existing: the first input wins") {
    auto merged = MergeOffline(BuiltinOps(), inputs, v1::PREFER_EXISTING);
    REQUIRE(merged.ok());
    std::map<int64_t, double> times;
    for (const v1::Entry& e : merged->entries) times[e.problem().norm().m()] = e.measurement().time_us();
    CHECK(times == std::map<int64_t, double>{{1024, 10.0}, {2048, 20.0}, {4096, 40.0}});
  }
}

}  // namespace
}  // namespace ktune
