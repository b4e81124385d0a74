#!/usr/bin/env python3
"""Offline checks of Tollgate's deployment files, for ops/lib/check-deploy.sh.

    python3 ops/lib/check_deploy.py k8s FILE...        Kubernetes manifests
    python3 ops/lib/check_deploy.py dockerfile FILE     ops/Dockerfile (and .dockerignore beside the root)
    python3 ops/lib/check_deploy.py env FILE            ops/systemd/tollgate.env.example

Prints one line per file, "ok   PATH (what was checked)" or "FAIL PATH: problem" (then one line per
further problem), and exits 1 when any file failed. Needs PyYAML, and kubernetes-validate for `k8s`
(it bundles the Kubernetes JSON schemas, so nothing is fetched).
"""

from __future__ import annotations

import pathlib
import re
import shlex
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def relative(path: pathlib.Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def known_variables() -> set[str]:
    """Every TOLLGATE_* variable the executables read, taken from the sources themselves."""
    names: set[str] = set()
    for source in (ROOT / "Sources").rglob("*.swift"):
        names.update(re.findall(r'"(TOLLGATE_[A-Z0-9_]+)"', source.read_text(encoding="utf-8")))
    return names


def report(path: pathlib.Path, problems: list[str], what: str) -> bool:
    if problems:
        print(f"FAIL {relative(path)}: {problems[0]}")
        for problem in problems[1:]:
            print(f"     {relative(path)}: {problem}")
        return False
    print(f"ok   {relative(path)} ({what})")
    return True


# ---------------------------------------------------------------------------------------- Kubernetes

# The oldest Kubernetes the manifests support (ops/OPERATIONS.md): the PodDisruptionBudgets'
# `unhealthyPodEvictionPolicy` is on by default from 1.27.
MIN_KUBERNETES = (1, 27)


def k8s_versions(utils) -> list[str]:
    """The oldest supported and the newest Kubernetes versions whose schemas the package bundles."""
    versions = sorted({".".join(v.split(".")[:2]) for v in utils.all_versions()},
                      key=lambda v: tuple(int(part) for part in v.split(".")))
    supported = [v for v in versions if tuple(int(part) for part in v.split(".")) >= MIN_KUBERNETES]
    versions = supported or versions[-1:]
    return [versions[0], versions[-1]] if len(versions) > 1 else versions


def containers_of(resource: dict) -> list[dict]:
    spec = resource.get("spec") or {}
    if resource.get("kind") == "Job" or resource.get("kind") in ("Deployment", "StatefulSet", "DaemonSet"):
        pod = ((spec.get("template") or {}).get("spec")) or {}
        return list(pod.get("containers") or []) + list(pod.get("initContainers") or [])
    return []


def pod_spec(resource: dict) -> dict:
    return (((resource.get("spec") or {}).get("template") or {}).get("spec")) or {}


def check_cross_references(resources: list[tuple[pathlib.Path, dict]], variables: set[str]) -> dict[pathlib.Path, list[str]]:
    """What the schemas cannot see: names that must match across objects, and Tollgate's own rules."""
    problems: dict[pathlib.Path, list[str]] = {}

    def add(path: pathlib.Path, message: str) -> None:
        problems.setdefault(path, []).append(message)

    by_kind: dict[str, dict[str, dict]] = {}
    for _, resource in resources:
        by_kind.setdefault(resource["kind"], {})[resource["metadata"]["name"]] = resource

    config_data: dict[str, str] = {}
    for name, config_map in by_kind.get("ConfigMap", {}).items():
        if isinstance(config_map.get("data"), dict):
            config_data.update(config_map["data"])

    def check_one(path: pathlib.Path, resource: dict) -> None:
        kind, name = resource["kind"], resource["metadata"]["name"]
        label = f"{kind}/{name}"
        if resource["metadata"].get("namespace"):
            add(path, f"{label}: names a namespace; the manifests must stay namespace-agnostic")

        # Variable names: a typo would be ignored silently by the processes.
        keys: list[str] = []
        if kind == "ConfigMap":
            keys += list((resource.get("data") or {}).keys())
        if kind == "Secret":
            keys += list((resource.get("stringData") or {}).keys()) + list((resource.get("data") or {}).keys())
        for container in containers_of(resource):
            keys += [env["name"] for env in container.get("env") or []]
        for key in keys:
            if key.startswith("TOLLGATE_") and key not in variables:
                add(path, f"{label}: {key} is not a variable Tollgate reads (typo?)")

        for container in containers_of(resource):
            where = f"{label} container {container.get('name')}"
            for source in container.get("envFrom") or []:
                for ref_kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    ref = source.get(field)
                    if ref and ref.get("name") not in by_kind.get(ref_kind, {}):
                        add(path, f"{where}: {field} {ref.get('name')!r} is not defined in these manifests")
            ports = container.get("ports") or []
            port_names = {p.get("name") for p in ports}
            port_numbers = {p.get("containerPort") for p in ports}
            for probe_name in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = container.get(probe_name)
                if not probe:
                    continue
                http = probe.get("httpGet") or {}
                port = http.get("port")
                if port is not None and port not in port_names and port not in port_numbers:
                    add(path, f"{where}: {probe_name} uses port {port!r}, which the container does not declare")
                if http and http.get("path") not in ("/health/live", "/health/ready"):
                    add(path, f"{where}: {probe_name} path {http.get('path')!r} is not /health/live or /health/ready")
            args = (container.get("command") or []) + (container.get("args") or [])
            if not args or args[0] not in ("tollgate-api", "tollgate-worker", "appstore-emulator"):
                add(path, f"{where}: the command must name a Tollgate executable, not {args!r}")

        if kind == "Deployment":
            selector = (resource["spec"].get("selector") or {}).get("matchLabels") or {}
            labels = ((resource["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
            if any(labels.get(key) != value for key, value in selector.items()):
                add(path, f"{label}: selector {selector} does not match the pod labels {labels}")
            for container in containers_of(resource):
                args = (container.get("command") or []) + (container.get("args") or [])
                if args[:1] in (["tollgate-api"], ["tollgate-worker"]):
                    check_stop_budget(path, label, resource, container, config_data, add)
                if args[:1] == ["tollgate-worker"]:
                    check_worker(path, label, resource, container, config_data, by_kind, add)

        if kind == "Service":
            selector = resource["spec"].get("selector") or {}
            targets = [d for d in by_kind.get("Deployment", {}).values()
                       if all((d["spec"]["template"]["metadata"].get("labels") or {}).get(k) == v
                              for k, v in selector.items())]
            if not targets:
                add(path, f"{label}: selector {selector} matches no Deployment's pods")
            for port in resource["spec"].get("ports") or []:
                target = port.get("targetPort", port.get("port"))
                declared = {p.get(key) for d in targets for c in containers_of(d) for p in c.get("ports") or []
                            for key in ("name", "containerPort")}
                if targets and target not in declared:
                    add(path, f"{label}: targetPort {target!r} is not a port of the selected pods")

        if kind == "HorizontalPodAutoscaler":
            ref = resource["spec"]["scaleTargetRef"]
            if ref.get("name") not in by_kind.get(ref.get("kind"), {}):
                add(path, f"{label}: scaleTargetRef {ref.get('kind')}/{ref.get('name')} is not defined in these manifests")
            elif "replicas" in by_kind[ref["kind"]][ref["name"]]["spec"]:
                add(path, f"{label}: {ref['kind']}/{ref['name']} sets spec.replicas, which every apply would reset")

        if kind == "PodDisruptionBudget":
            selector = (resource["spec"].get("selector") or {}).get("matchLabels") or {}
            if not any(all((d["spec"]["template"]["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
                       for d in by_kind.get("Deployment", {}).values()):
                add(path, f"{label}: selector {selector} matches no Deployment's pods")

    for path, resource in resources:
        try:
            check_one(path, resource)
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            # A shape the schemas already reported (or one they allow but these checks do not expect).
            add(path, f"{resource['kind']}/{resource['metadata']['name']}: cannot cross-check ({type(error).__name__}: {error})")
    return problems


def check_stop_budget(path, label, resource, container, config_data, add) -> None:
    # After its preStop pause, the API or worker drains for TOLLGATE_SHUTDOWN_GRACE_S (requests in
    # progress, jobs in flight), then cancels for up to 5 s: Kubernetes must not SIGKILL it before that.
    grace = int(config_data.get("TOLLGATE_SHUTDOWN_GRACE_S", "25"))
    period = pod_spec(resource).get("terminationGracePeriodSeconds", 30)
    pre_stop = (((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
    pause = int(pre_stop[1]) if pre_stop[:1] == ["sleep"] and len(pre_stop) > 1 and str(pre_stop[1]).isdigit() else 0
    if period <= pause + grace + 5:
        add(path, f"{label}: terminationGracePeriodSeconds {period} must exceed the preStop pause ({pause}) + "
                  f"TOLLGATE_SHUTDOWN_GRACE_S ({grace}) + 5")


def check_worker(path, label, resource, container, config_data, by_kind, add) -> None:
    env = {e["name"]: e for e in container.get("env") or []}
    name = env.get("TOLLGATE_WORKER_NAME", {})
    if ((name.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != "metadata.name":
        add(path, f"{label}: TOLLGATE_WORKER_NAME must come from the pod's name (fieldRef metadata.name)")
    metrics_port = env.get("TOLLGATE_METRICS_PORT", {}).get("value", config_data.get("TOLLGATE_METRICS_PORT", "9464"))
    if int(metrics_port) not in {p.get("containerPort") for p in container.get("ports") or []}:
        add(path, f"{label}: TOLLGATE_METRICS_PORT {metrics_port} is not a declared container port")
    if config_data.get("TOLLGATE_HTTP_HOST", "127.0.0.1") in ("127.0.0.1", "localhost", "::1"):
        add(path, f"{label}: TOLLGATE_HTTP_HOST is loopback, so probes and Prometheus cannot reach the worker")


def check_k8s(files: list[str]) -> bool:
    try:
        import yaml
        import kubernetes_validate.utils as utils
    except ImportError as error:
        print(f"FAIL kubernetes manifests: {error} (install kubernetes-validate)")
        return False
    versions = k8s_versions(utils)
    variables = known_variables()
    ok = True
    resources: list[tuple[pathlib.Path, dict]] = []
    file_problems: dict[pathlib.Path, list[str]] = {}
    counts: dict[pathlib.Path, int] = {}
    for name in files:
        path = pathlib.Path(name)
        problems = file_problems.setdefault(path, [])
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
        except (OSError, yaml.YAMLError) as error:
            problems.append(f"not readable YAML: {' '.join(str(error).split())}")
            continue
        if not documents:
            problems.append("holds no Kubernetes object")
        counts[path] = len(documents)
        for index, document in enumerate(documents):
            where = f"document {index + 1}"
            if not isinstance(document, dict) or not all(k in document for k in ("apiVersion", "kind", "metadata")):
                problems.append(f"{where}: not a Kubernetes object (apiVersion, kind and metadata are required)")
                continue
            if not isinstance(document["metadata"], dict) or not document["metadata"].get("name"):
                problems.append(f"{where}: {document['kind']} has no metadata.name")
                continue
            label = f"{document['kind']}/{document['metadata']['name']}"
            for version in versions:
                try:
                    utils.validate(document, version, strict=True)
                except utils.ValidationError as error:
                    field = ".".join(str(part) for part in error.path) or "(top level)"
                    problems.append(f"{label} against Kubernetes {error.version}: {field}: {error.message}")
                    break
                except utils.SchemaNotFoundError as error:
                    problems.append(f"{label}: {error.message} (only built-in kinds belong in ops/k8s)")
                    break
            # Cross-references see every object, valid or not, so that one schema error does not
            # turn into "not defined" errors elsewhere.
            resources.append((path, document))
    for path, problems in check_cross_references(resources, variables).items():
        file_problems.setdefault(path, []).extend(problems)
    names = [(r["kind"], r["metadata"]["name"]) for _, r in resources]
    for kind_name in {n for n in names if names.count(n) > 1}:
        for path, resource in resources:
            if (resource["kind"], resource["metadata"]["name"]) == kind_name:
                file_problems[path].append(f"{kind_name[0]}/{kind_name[1]} is defined more than once")
    for path, problems in file_problems.items():
        what = (f"{counts.get(path, 0)} object(s), strict schemas of Kubernetes {' and '.join(versions)}, "
                "cross-references")
        ok = report(path, problems, what) and ok
    return ok


# ---------------------------------------------------------------------------------------- Dockerfile

def dockerfile_instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions = []
    buffer, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += stripped
        keyword, _, rest = buffer.partition(" ")
        instructions.append((start, keyword.upper(), rest.strip()))
        buffer = ""
    if buffer:
        keyword, _, rest = buffer.partition(" ")
        instructions.append((start, keyword.upper(), rest.strip()))
    return instructions


KNOWN_INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
    "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER",
}


def check_dockerfile(name: str) -> bool:
    path = pathlib.Path(name)
    problems: list[str] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        return report(path, [f"not readable: {error}"], "")
    instructions = dockerfile_instructions(text)
    for line, keyword, _ in instructions:
        if keyword not in KNOWN_INSTRUCTIONS:
            problems.append(f"line {line}: unknown instruction {keyword}")
    stages = [(line, args) for line, keyword, args in instructions if keyword == "FROM"]
    if not instructions or instructions[0][1] not in ("FROM", "ARG"):
        problems.append("the first instruction must be FROM (or ARG before FROM)")
    if not any(re.search(r"\s+AS\s+builder\s*$", args, re.IGNORECASE) for _, args in stages):
        problems.append("no builder stage (FROM ... AS builder)")
    if len(stages) < 2:
        problems.append("not multi-stage: a builder stage and a final runtime stage are needed")
    else:
        final_line = stages[-1][0]
        final = [(line, keyword, args) for line, keyword, args in instructions if line >= final_line]
        if re.search(r"\s+AS\s+builder\s*$", stages[-1][1], re.IGNORECASE):
            problems.append("the final stage is the builder")
        if not any(keyword == "COPY" and "--from=builder" in args for _, keyword, args in final):
            problems.append("the final stage copies nothing from the builder (COPY --from=builder)")
        users = [args for _, keyword, args in final if keyword == "USER"]
        if not users or users[-1].split(":")[0] in ("root", "0"):
            problems.append("the final stage must run as a non-root USER")
        exposed = {port.split("/")[0] for _, keyword, args in final if keyword == "EXPOSE" for port in args.split()}
        for port in ("8080", "9464"):
            if port not in exposed:
                problems.append(f"the final stage does not EXPOSE {port}")
        if not any(keyword in ("CMD", "ENTRYPOINT") for _, keyword, _ in final):
            problems.append("the final stage has neither CMD nor ENTRYPOINT")
        runtime_install = " ".join(args for _, keyword, args in final if keyword == "RUN")
        for package in ("libhiredis0.14", "libpq5", "ca-certificates", "tzdata"):
            if package not in runtime_install.split():
                problems.append(f"the final stage does not install {package}")
        if re.search(r"\b(swift|libhiredis-dev|libpq-dev|build-essential)\b", runtime_install):
            problems.append("the final stage installs build tools; they belong in the builder")
    builds = " ".join(args for _, keyword, args in instructions if keyword == "RUN" and "swift build" in args)
    for flag in ("-c release", "--static-swift-stdlib"):
        if flag not in builds:
            problems.append(f"no `swift build {flag}` in the builder")
    for product in ("tollgate-api", "tollgate-worker", "appstore-emulator"):
        if product not in builds:
            problems.append(f"the builder does not build {product}")
    copies = [(line, args) for line, keyword, args in instructions if keyword == "COPY"]
    manifest = next((line for line, args in copies if "Package.swift" in args.split()), None)
    sources = next((line for line, args in copies if args.split()[0].startswith("Sources")), None)
    resolve = next((line for line, keyword, args in instructions if keyword == "RUN" and "swift package resolve" in args), None)
    if manifest is None or sources is None or resolve is None or not (manifest < resolve < sources):
        problems.append("dependencies must be resolved in their own layer: COPY Package.swift, "
                        "RUN swift package resolve, then COPY Sources")
    ignore = ROOT / ".dockerignore"
    if not ignore.is_file():
        problems.append(".dockerignore is missing at the repository root")
    else:
        patterns = {line.strip() for line in ignore.read_text(encoding="utf-8").splitlines()}
        for needed in (".build", ".git"):
            if needed not in patterns:
                problems.append(f".dockerignore does not exclude {needed}")
    return report(path, problems, f"{len(stages)} stages, {len(instructions)} instructions; .dockerignore; "
                                  "not built (no Docker engine here)")


# ---------------------------------------------------------------------------------------- env file

def check_env(name: str) -> bool:
    path = pathlib.Path(name)
    problems: list[str] = []
    variables = known_variables()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        return report(path, [f"not readable: {error}"], "")
    documented: set[str] = set()
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        match = re.match(r"^#?(TOLLGATE_[A-Z0-9_]+)=(.*)$", stripped)
        if match:
            documented.add(match.group(1))
            if match.group(1) not in variables:
                problems.append(f"line {number}: {match.group(1)} is not a variable Tollgate reads")
            if not stripped.startswith("#"):
                value = match.group(2)
                if value != value.strip() or value[:1] in ("'", '"'):
                    problems.append(f"line {number}: no quotes or spaces around values (systemd and docker --env-file differ on them)")
                if match.group(1) in ("TOLLGATE_WORKER_NAME", "TOLLGATE_METRICS_PORT"):
                    problems.append(f"line {number}: {match.group(1)} must not be set in the shared file (it overrides every worker instance)")
            continue
        if stripped and not stripped.startswith("#"):
            problems.append(f"line {number}: not VARIABLE=value or a comment: {shlex.quote(stripped)[:60]}")
    for missing in sorted(variables - documented):
        problems.append(f"{missing} is read by Tollgate but not documented here")
    return report(path, problems, f"{len(documented)} variables documented, all {len(variables)} that the sources read")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("k8s", "dockerfile", "env"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    command, files = argv[1], argv[2:]
    if command == "k8s":
        ok = check_k8s(files)
    elif command == "dockerfile":
        ok = all([check_dockerfile(name) for name in files])
    else:
        ok = all([check_env(name) for name in files])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
