"""The multi-node deployment in docker/ (compose.yaml, the image, the env file), checked by
reading the files: nothing is built or started.

Every check returns the problems it finds. The tests assert that the repository's files have
none, and that each check reports a deliberately broken copy, so that no check passes vacuously.
The compose file is read with the example env file's values, as
``docker compose --env-file docker/.env.example config`` would see it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import posixpath
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from jobs.common.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
ENV_EXAMPLE = DOCKER / ".env.example"
LOCK = ROOT / "requirements.lock"
DAG_FILE = ROOT / "dags" / "feeds_daily.py"

AIRFLOW_COMPONENTS = {
    "airflow-api-server": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
AIRFLOW_INIT = "airflow-init"
POSTGRES = "postgres"
SPARK_MASTER = "spark-master"
SPARK_WORKER = "spark-worker"
OBJECT_STORE = "minio"
CREATE_BUCKET = "create-bucket"
EXPECTED_SERVICES = {
    *AIRFLOW_COMPONENTS,
    AIRFLOW_INIT,
    POSTGRES,
    SPARK_MASTER,
    SPARK_WORKER,
    OBJECT_STORE,
    CREATE_BUCKET,
}
MIN_WORKERS = 2
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
SECRET_KEY = re.compile(r"PASSWORD|SECRET|FERNET|ACCESS_KEY|SQL_ALCHEMY_CONN|ROOT_USER")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

Compose = dict[str, Any]
Problems = list[str]
IgnoreRules = list[tuple[bool, re.Pattern[str]]]


# -- reading the files -----------------------------------------------------------------------


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a compose env file (comments and blank lines skipped)."""
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path.name}: not KEY=VALUE: {line!r}")
        values[key.strip()] = value.strip().strip("'\"")
    return values


VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution: $$, ${X}, $X, ${X:-d}, ${X-d}, ${X:?e}, ${X?e}, ${X:+r}."""

    def substitute(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("plain")
        op, arg = m.group("op") or "", m.group("arg") or ""
        value = env.get(name)
        missing = not value if op.startswith(":") else value is None
        if op.endswith("-"):
            return arg if missing else str(value)
        if op.endswith("?"):
            if missing:
                raise KeyError(f"required variable {name} is not set: {arg}")
            return str(value)
        if op.endswith("+"):
            return "" if missing else arg
        return value or ""

    return VARIABLE.sub(substitute, text)


def resolve(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, dict):
        return {key: resolve(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [resolve(item, env) for item in node]
    return node


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


@functools.cache
def raw_compose() -> Compose:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "compose.yaml is not a mapping"
    return data


@functools.cache
def env_example() -> dict[str, str]:
    return read_env_file(ENV_EXAMPLE)


def resolved_compose() -> Compose:
    """A fresh copy of the compose file with the example env file's values substituted."""
    return resolve(raw_compose(), env_example())


def services(compose: Compose) -> dict[str, dict[str, Any]]:
    return compose.get("services") or {}


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in env)
        return {key: value for key, value in pairs}
    return {key: "" if value is None else str(value) for key, value in env.items()}


def command(service: Mapping[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def depends_on(service: Mapping[str, Any]) -> dict[str, str]:
    """Target service -> condition."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def mounts(service: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(type, source, target) of each volume entry; type is "volume" or "bind"."""
    for entry in service.get("volumes") or []:
        if isinstance(entry, str):
            parts = entry.split(":")
            if len(parts) == 1:
                yield "volume", "", parts[0]
                continue
            source, target = parts[0], parts[1]
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        else:
            kind, source, target = (
                entry.get("type", "volume"),
                entry.get("source", ""),
                entry["target"],
            )
        yield kind, source, target


def option(args: list[str], flag: str) -> str | None:
    """The value after ``flag`` (``--flag value`` or ``--flag=value``) in a command."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def image_reference(ref: str) -> tuple[str, str | None, str | None]:
    """(name, tag, digest) of an image reference."""
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = None
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    return name, tag, digest or None


def unpinned(ref: str | None, where: str) -> Problems:
    if not ref:
        return [f"{where}: no image"]
    if "$" in ref:
        return [f"{where}: image {ref!r} is not resolved"]
    _, tag, digest = image_reference(ref)
    if tag is None and digest is None:
        return [f"{where}: image {ref!r} has no tag"]
    if tag == "latest":
        return [f"{where}: image {ref!r} uses the tag latest"]
    return []


def shown(path: Path) -> str:
    """A path as messages show it: relative to the repository when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def lock_pins() -> dict[str, str]:
    """``name==version`` pins of requirements.lock, by canonical name."""
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#]+)", line)
        if m:
            pins[canonical(m.group(1))] = m.group(2)
    return pins


# -- Dockerfiles -----------------------------------------------------------------------------


@dataclasses.dataclass
class Dockerfile:
    path: Path
    args: dict[str, str] = dataclasses.field(default_factory=dict)
    bases: list[str] = dataclasses.field(default_factory=list)
    stages: set[str] = dataclasses.field(default_factory=set)
    copies: list[tuple[list[str], str]] = dataclasses.field(default_factory=list)
    copy_images: list[str] = dataclasses.field(default_factory=list)
    runs: list[str] = dataclasses.field(default_factory=list)
    envs: list[str] = dataclasses.field(default_factory=list)
    entrypoint: list[str] = dataclasses.field(default_factory=list)

    def expand(self, text: str) -> str:
        return re.sub(
            r"\$\{(\w+)\}|\$(\w+)",
            lambda m: self.args.get(m.group(1) or m.group(2), m.group(0)),
            text,
        )


def instructions(text: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, rest) with continuation lines joined and comments dropped."""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            keyword, _, rest = full.partition(" ")
            yield keyword.upper(), rest.strip()


def parse_dockerfile(path: Path) -> Dockerfile:
    parsed = Dockerfile(path)
    workdir = "/"
    for keyword, rest in instructions(path.read_text(encoding="utf-8")):
        if keyword == "ARG":
            name, sep, default = rest.partition("=")
            if sep:
                parsed.args[name.strip()] = default.strip().strip("'\"")
        elif keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            parsed.bases.append(parsed.expand(words[0]))
            if len(words) == 3 and words[1].upper() == "AS":
                parsed.stages.add(words[2])
        elif keyword == "WORKDIR":
            workdir = posixpath.join(workdir, rest)
        elif keyword in ("COPY", "ADD"):
            words = shlex.split(rest)
            source_stage = next(
                (w.split("=", 1)[1] for w in words if w.startswith("--from=")), None
            )
            words = [w for w in words if not w.startswith("--")]
            if source_stage is not None:
                if source_stage not in parsed.stages and not source_stage.isdigit():
                    parsed.copy_images.append(parsed.expand(source_stage))
                continue
            parsed.copies.append((words[:-1], posixpath.join(workdir, words[-1])))
        elif keyword == "RUN":
            parsed.runs.append(rest)
        elif keyword == "ENV":
            parsed.envs.append(rest)
        elif keyword == "ENTRYPOINT":
            parsed.entrypoint = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    return parsed


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern: ``*`` within one path segment, ``**`` across segments."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignore_rules(context: Path, dockerfile: Path) -> IgnoreRules:
    """(excludes, pattern) rules; BuildKit prefers ``<Dockerfile>.dockerignore``."""
    path = dockerfile.with_name(dockerfile.name + ".dockerignore")
    if not path.exists():
        path = context / ".dockerignore"
    rules = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                include = line.startswith("!")
                rules.append((not include, glob_regex(line.lstrip("!").strip("/"))))
    return rules


def ignored(rel: str, rules: IgnoreRules) -> bool:
    """Whether the build context leaves ``rel`` out: the last rule matching it or one of its
    parent folders decides."""
    parts = rel.strip("/").split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for excludes, rx in rules:
        if any(rx.fullmatch(p) for p in prefixes):
            excluded = excludes
    return excluded


def image_files(context: Path, dockerfile: Dockerfile, rules: IgnoreRules) -> set[str]:
    """Paths inside the image of the files the Dockerfile copies from the build context."""
    files: set[str] = set()
    for sources, dest in dockerfile.copies:
        into_dir = dest.endswith("/") or len(sources) > 1
        for source in sources:
            for path in context.glob(source):
                target = posixpath.normpath(posixpath.join(dest, path.name) if into_dir else dest)
                if path.is_dir():
                    files.update(
                        posixpath.join(target, p.relative_to(path).as_posix())
                        for p in path.rglob("*")
                        if p.is_file() and not ignored(p.relative_to(context).as_posix(), rules)
                    )
                elif not ignored(path.relative_to(context).as_posix(), rules):
                    files.add(target)
    return files


def build_of(service: Mapping[str, Any]) -> tuple[Path, Path] | None:
    """(context, Dockerfile) of a service built from the repository, relative to compose.yaml."""
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        context, dockerfile = build, "Dockerfile"
    else:
        context, dockerfile = build.get("context", "."), build.get("dockerfile", "Dockerfile")
    context_dir = (COMPOSE.parent / context).resolve()
    return context_dir, context_dir / dockerfile


def feedpipe_dockerfile(compose: Compose) -> tuple[Path, Dockerfile]:
    built = build_of(services(compose)["airflow-scheduler"])
    assert built is not None, "the Airflow scheduler is not built from a Dockerfile"
    return built[0], parse_dockerfile(built[1])


# -- checks ----------------------------------------------------------------------------------


def check_services(compose: Compose) -> Problems:
    missing = EXPECTED_SERVICES - set(services(compose))
    return [f"missing service {name}" for name in sorted(missing)]


def check_airflow_components(compose: Compose) -> Problems:
    """Each Airflow component runs on its own; the init service migrates the database and
    creates the admin user."""
    problems = []
    svc = services(compose)
    for name, component in AIRFLOW_COMPONENTS.items():
        if name in svc and command(svc[name])[:2] != ["airflow", component]:
            problems.append(f"{name} does not run `airflow {component}`: {command(svc[name])}")
    if AIRFLOW_INIT in svc:
        text = " ".join(command(svc[AIRFLOW_INIT]))
        for word in command(svc[AIRFLOW_INIT]):
            script = DOCKER / posixpath.basename(word)
            if word.endswith(".sh") and script.is_file():
                text += script.read_text(encoding="utf-8")
        if "airflow db migrate" not in text:
            problems.append(f"{AIRFLOW_INIT} does not run `airflow db migrate`")
        if "AIRFLOW_ADMIN_PASSWORD" not in text:
            problems.append(f"{AIRFLOW_INIT} does not set the admin's password")
        if svc[AIRFLOW_INIT].get("restart", "no") != "no":
            problems.append(f"{AIRFLOW_INIT} is one-shot: it must not restart")
    return problems


def check_images(compose: Compose) -> Problems:
    """Every image is pinned to a tag other than latest, or built from a Dockerfile of the
    repository whose base images are pinned and whose copied files exist in the context."""
    problems = []
    for name, service in services(compose).items():
        built = build_of(service)
        if built is None:
            problems += unpinned(service.get("image"), name)
            continue
        context, dockerfile_path = built
        if "image" in service:
            problems += unpinned(service["image"], f"{name} (built)")
        if not context.is_dir():
            problems.append(f"{name}: build context {shown(context)} does not exist")
            continue
        if not dockerfile_path.is_file():
            problems.append(f"{name}: Dockerfile {shown(dockerfile_path)} does not exist")
            continue
        dockerfile = parse_dockerfile(dockerfile_path)
        where = f"{name}: {shown(dockerfile_path)}"
        for base in dockerfile.bases:
            if base not in dockerfile.stages and base != "scratch":
                problems += unpinned(base, f"{where} FROM")
        for ref in dockerfile.copy_images:
            problems += unpinned(ref, f"{where} COPY --from")
        rules = ignore_rules(context, dockerfile_path)
        for sources, _ in dockerfile.copies:
            for source in sources:
                if not list(context.glob(source)):
                    problems.append(f"{where}: copies {source}, which does not exist")
                elif ignored(source, rules):
                    problems.append(f"{where}: copies {source}, left out by .dockerignore")
        files = image_files(context, dockerfile, rules)
        for word in [*dockerfile.entrypoint, *command(service)]:
            if word.startswith("/") and word.endswith((".sh", ".py")) and word not in files:
                problems.append(f"{name}: runs {word}, which the image does not contain")
    return problems


def check_one_python(compose: Compose) -> Problems:
    """The Spark driver (in Airflow) and the executors (in the workers) run the same image."""
    svc = services(compose)
    users = [*AIRFLOW_COMPONENTS, AIRFLOW_INIT, SPARK_MASTER, SPARK_WORKER]
    images = {(svc[n].get("image"), json.dumps(svc[n].get("build"))) for n in users if n in svc}
    return [] if len(images) == 1 else [f"Airflow and Spark use different images: {images}"]


def check_versions(dockerfile: Dockerfile, pins: Mapping[str, str]) -> Problems:
    """The image's Airflow, Spark, Python and uv are those of the lock, pyproject and Makefile,
    and the image installs the lock and checks what it installed."""
    problems = []
    args = dockerfile.args
    expected = {
        "AIRFLOW_VERSION": pins.get("apache-airflow"),
        "SPARK_VERSION": pins.get("pyspark"),
    }
    for arg, version in expected.items():
        if version is None or args.get(arg) != version:
            problems.append(f"Dockerfile {arg}={args.get(arg)} but requirements.lock has {version}")
    if pins.get("pyspark-client") != pins.get("pyspark"):
        problems.append("requirements.lock pins pyspark and pyspark-client to different versions")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    uv = re.search(r"^UV_VERSION\s*:?=\s*(\S+)", makefile, re.M)
    if uv is None or args.get("UV_VERSION") != uv.group(1):
        problems.append(f"Dockerfile UV_VERSION={args.get('UV_VERSION')}, Makefile differs")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    requires = re.search(r'^requires-python\s*=\s*"([^"]+)"', pyproject, re.M)
    python = args.get("PYTHON_VERSION", "")
    if requires is None or not python or not SpecifierSet(requires.group(1)).contains(python):
        problems.append(f"Dockerfile PYTHON_VERSION={python!r} is outside requires-python")
    if not any("requirements.lock" in sources for sources, _ in dockerfile.copies):
        problems.append("the Dockerfile does not copy requirements.lock")
    if not any("pip sync" in run and "requirements.lock" in run for run in dockerfile.runs):
        problems.append("the Dockerfile does not install exactly requirements.lock (pip sync)")
    if not any("${AIRFLOW_VERSION}" in r and "${SPARK_VERSION}" in r for r in dockerfile.runs):
        problems.append("the Dockerfile does not check the installed Airflow and Spark versions")
    if not any("jobs.common.s3a" in run for run in dockerfile.runs):
        problems.append("the Dockerfile does not fetch the S3A jars (python -m jobs.common.s3a)")
    return problems


def check_metadata_database(compose: Compose) -> Problems:
    """Every Airflow service talks to the postgres service, with its user, password and db."""
    problems = []
    svc = services(compose)
    pg = environment(svc.get(POSTGRES, {}))
    for name in [*AIRFLOW_COMPONENTS, AIRFLOW_INIT]:
        if name not in svc:
            continue
        conn = environment(svc[name]).get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
        url = urlsplit(conn)
        if not url.scheme.startswith("postgresql"):
            problems.append(f"{name}: SQL_ALCHEMY_CONN is not PostgreSQL: {conn!r}")
            continue
        if url.hostname != POSTGRES or POSTGRES not in svc:
            problems.append(f"{name}: SQL_ALCHEMY_CONN host {url.hostname} is not {POSTGRES}")
        if url.port not in (None, 5432):
            problems.append(f"{name}: SQL_ALCHEMY_CONN port {url.port} is not PostgreSQL's")
        actual = (url.username, url.password, url.path.lstrip("/"))
        wanted = (pg.get("POSTGRES_USER"), pg.get("POSTGRES_PASSWORD"), pg.get("POSTGRES_DB"))
        if actual != wanted:
            problems.append(f"{name}: SQL_ALCHEMY_CONN user/password/db differ from {POSTGRES}'s")
    if POSTGRES in svc:
        if "healthcheck" not in svc[POSTGRES]:
            problems.append(f"{POSTGRES} has no healthcheck")
        if not any(kind == "volume" and source for kind, source, _ in mounts(svc[POSTGRES])):
            problems.append(f"{POSTGRES} keeps its data outside a named volume")
    return problems


def check_startup_order(compose: Compose) -> Problems:
    svc = services(compose)
    wanted = {
        name: {POSTGRES: "service_healthy", AIRFLOW_INIT: "service_completed_successfully"}
        for name in AIRFLOW_COMPONENTS
    }
    wanted[AIRFLOW_INIT] = {POSTGRES: "service_healthy"}
    wanted[SPARK_WORKER] = {SPARK_MASTER: "service_healthy"}
    wanted[CREATE_BUCKET] = {OBJECT_STORE: "service_healthy"}
    problems = []
    for name, needs in wanted.items():
        deps = depends_on(svc.get(name, {}))
        for target, condition in needs.items():
            if deps.get(target) != condition:
                problems.append(f"{name} must depend on {target} with {condition}")
    return problems


def check_depends_on(compose: Compose) -> Problems:
    problems = []
    svc = services(compose)
    for name, service in svc.items():
        for target, condition in depends_on(service).items():
            if target not in svc:
                problems.append(f"{name} depends on {target}, which is not a service")
                continue
            if condition not in CONDITIONS:
                problems.append(f"{name} depends on {target} with unknown {condition!r}")
            if condition == "service_healthy" and "healthcheck" not in svc[target]:
                problems.append(f"{name} waits for {target} to be healthy: it has no healthcheck")
            if condition == "service_completed_successfully" and svc[target].get(
                "restart", "no"
            ) not in ("no", "on-failure"):
                problems.append(f"{name} waits for {target} to complete, but {target} restarts")
    return problems


def created_buckets(compose: Compose) -> set[str]:
    args = command(services(compose).get(CREATE_BUCKET, {}))
    script = next((i for i, a in enumerate(args) if a.endswith("create_bucket.py")), None)
    return set() if script is None else set(args[script + 1 :])


def check_storage(compose: Compose) -> Problems:
    """Landing and warehouse are S3 URLs on the bucket the create-bucket service creates."""
    problems = []
    buckets = created_buckets(compose)
    if not buckets:
        problems.append(f"{CREATE_BUCKET} creates no bucket")
    svc = services(compose)
    for name, service in svc.items():
        env = environment(service)
        must = name in AIRFLOW_COMPONENTS
        if not must and "FEEDPIPE_LANDING" not in env and "FEEDPIPE_WAREHOUSE" not in env:
            continue
        roots = {key: env.get(key, "") for key in ("FEEDPIPE_LANDING", "FEEDPIPE_WAREHOUSE")}
        for key, root in roots.items():
            url = urlsplit(root)
            # jobs/common/storage.py accepts s3:// and s3a:// roots
            if url.scheme not in ("s3", "s3a"):
                problems.append(f"{name}: {key}={root!r} is not an s3:// or s3a:// URL")
            elif url.netloc not in buckets:
                problems.append(f"{name}: {key}={root!r} is not on a bucket {CREATE_BUCKET} makes")
            elif not url.path.strip("/"):
                problems.append(f"{name}: {key}={root!r} has no prefix")
        if roots["FEEDPIPE_LANDING"] == roots["FEEDPIPE_WAREHOUSE"]:
            problems.append(f"{name}: landing and warehouse are the same place")
    return problems


def object_store_port(compose: Compose) -> int:
    address = option(command(services(compose).get(OBJECT_STORE, {})), "--address") or ":9000"
    return int(address.rsplit(":", 1)[1])


def check_object_store(compose: Compose) -> Problems:
    """The S3 endpoint is the object-store service, with its root credentials, and the store
    keeps its data in a named volume."""
    problems = []
    svc = services(compose)
    store = environment(svc.get(OBJECT_STORE, {}))
    credentials = (store.get("MINIO_ROOT_USER"), store.get("MINIO_ROOT_PASSWORD"))
    port = object_store_port(compose)
    for name, service in svc.items():
        env = environment(service)
        uses_s3 = name == CREATE_BUCKET or "FEEDPIPE_LANDING" in env or "FEEDPIPE_WAREHOUSE" in env
        endpoint = env.get("FEEDPIPE_S3_ENDPOINT") or env.get("AWS_ENDPOINT_URL")
        if endpoint is None:
            if uses_s3:
                problems.append(f"{name}: no FEEDPIPE_S3_ENDPOINT")
            continue
        url = urlsplit(endpoint)
        if url.scheme not in ("http", "https") or url.hostname != OBJECT_STORE:
            problems.append(f"{name}: S3 endpoint {endpoint!r} is not the {OBJECT_STORE} service")
        elif (url.port or (443 if url.scheme == "https" else 80)) != port:
            problems.append(f"{name}: S3 endpoint {endpoint!r} is not on port {port}")
        keys = (env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY"))
        if keys != credentials:
            problems.append(f"{name}: AWS keys are not {OBJECT_STORE}'s credentials")
    if OBJECT_STORE in svc:
        args = command(svc[OBJECT_STORE])
        data = option(args, "server")
        volumes = {target for kind, source, target in mounts(svc[OBJECT_STORE]) if source}
        if data is None or data not in volumes:
            problems.append(f"{OBJECT_STORE}: its data folder {data} is not on a named volume")
        if "healthcheck" not in svc[OBJECT_STORE]:
            problems.append(f"{OBJECT_STORE} has no healthcheck")
    return problems


def spark_conn_env_name() -> str:
    """``AIRFLOW_CONN_<ID>`` of the Spark connection the DAG submits to."""
    m = re.search(r'conn_id="(\w+)"', DAG_FILE.read_text(encoding="utf-8"))
    assert m, "no conn_id in the DAG"
    return f"AIRFLOW_CONN_{m.group(1).upper()}"


def check_spark(compose: Compose) -> Problems:
    """Workers, Airflow's Spark connection and FEEDPIPE_SPARK_MASTER all name the master."""
    problems = []
    svc = services(compose)
    master_args = command(svc.get(SPARK_MASTER, {}))
    if "org.apache.spark.deploy.master.Master" not in master_args:
        problems.append(f"{SPARK_MASTER} does not run a Spark master")
    host = option(master_args, "--host") or SPARK_MASTER
    if host != SPARK_MASTER:
        problems.append(f"{SPARK_MASTER} binds to {host}, not its service name")
    master_url = f"spark://{SPARK_MASTER}:{option(master_args, '--port') or 7077}"
    worker = svc.get(SPARK_WORKER, {})
    worker_args = command(worker)
    if "org.apache.spark.deploy.worker.Worker" not in worker_args:
        problems.append(f"{SPARK_WORKER} does not run a Spark worker")
    urls = [a for a in worker_args if a.startswith("spark://")]
    if urls != [master_url]:
        problems.append(f"{SPARK_WORKER} connects to {urls}, not {master_url}")
    replicas = (worker.get("deploy") or {}).get("replicas", worker.get("scale", 1))
    if int(replicas) < MIN_WORKERS:
        problems.append(f"{SPARK_WORKER} has {replicas} replicas, fewer than {MIN_WORKERS}")
    conn_name = spark_conn_env_name()
    for name, service in svc.items():
        env = environment(service)
        if name in AIRFLOW_COMPONENTS and conn_name not in env:
            problems.append(f"{name}: no {conn_name}")
        if conn_name in env:
            conn = json.loads(env[conn_name])
            url = conn.get("host", "")
            url = f"{url}:{conn['port']}" if conn.get("port") else url
            if url != master_url:
                problems.append(f"{name}: {conn_name} submits to {url}, not {master_url}")
        if "FEEDPIPE_SPARK_MASTER" in env and env["FEEDPIPE_SPARK_MASTER"] != master_url:
            problems.append(f"{name}: FEEDPIPE_SPARK_MASTER is not {master_url}")
        for key in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME"):
            if env.get(key) in LOOPBACK:
                problems.append(f"{name}: {key}={env[key]} cannot be reached from other nodes")
    return problems


@functools.cache
def names_read_by_code() -> frozenset[str]:
    """Environment variables feedpipe reads: FEEDPIPE_<SETTING>, and every FEEDPIPE_*/AWS_*
    name spelled out in jobs/ and dags/."""
    names = {f"FEEDPIPE_{f.name.upper()}" for f in dataclasses.fields(Settings)}
    for path in [*(ROOT / "jobs").rglob("*.py"), *(ROOT / "dags").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"[\"']((?:FEEDPIPE|AWS)_[A-Z0-9_]+)[\"']", text))
    return frozenset(names)


def check_setting_names(compose: Compose, dockerfile: Dockerfile) -> Problems:
    """No FEEDPIPE_*/AWS_* variable that the code does not read (a typo is silently ignored)."""
    known = names_read_by_code()
    problems = []
    for name, service in services(compose).items():
        for key in environment(service):
            if key.startswith(("FEEDPIPE_", "AWS_")) and key not in known:
                problems.append(f"{name}: {key} is not read by feedpipe")
    for env in dockerfile.envs:
        for key in re.findall(r"\b(FEEDPIPE_[A-Z0-9_]+)=", env):
            if key not in known:
                problems.append(f"Dockerfile: {key} is not read by feedpipe")
    return problems


def check_volumes_and_files(compose: Compose) -> Problems:
    """Named volumes are declared (and used); host paths exist, relative to compose.yaml."""
    problems = []
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, service in services(compose).items():
        for kind, source, _ in mounts(service):
            if kind == "volume" and source:
                used.add(source)
                if source not in declared:
                    problems.append(f"{name}: volume {source} is not declared")
            elif kind == "bind":
                if source.startswith(("/", "~")):
                    problems.append(f"{name}: bind mount {source} is not relative to the repo")
                elif not (COMPOSE.parent / source).exists():
                    problems.append(f"{name}: bind mount {source} does not exist")
        env_files = service.get("env_file") or []
        for entry in [env_files] if isinstance(env_files, str | dict) else env_files:
            path = entry if isinstance(entry, str) else entry.get("path", "")
            required = isinstance(entry, str) or entry.get("required", True)
            if required and not (COMPOSE.parent / path).is_file():
                problems.append(f"{name}: env file {path} does not exist")
    problems += [f"volume {v} is declared but never used" for v in sorted(declared - used)]
    return problems


def check_credentials(raw: Compose, example: Mapping[str, str]) -> Problems:
    """Secrets are never written in compose.yaml: they are ${VARIABLES} of the env file, and
    docker/.env.example defines every variable compose.yaml requires."""
    problems = []
    for name, service in services(raw).items():
        for key, value in environment(service).items():
            if SECRET_KEY.search(key) and not key.endswith("_FILE") and "${" not in value:
                problems.append(f"{name}: {key} is written in compose.yaml, not read from env")
    for text in strings(raw):
        for m in VARIABLE.finditer(text):
            name = m.group("braced") or m.group("plain")
            op = m.group("op") or ""
            if name and not op.endswith(("-", "+")) and name not in example:
                problems.append(f"${{{name}}} is used but not in {ENV_EXAMPLE.name}")
    gitignore = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    if "docker/.env" not in gitignore:
        problems.append("docker/.env (the real credentials) is not in .gitignore")
    return problems


# -- tests -----------------------------------------------------------------------------------


def test_compose_file_resolves_with_the_example_env_file():
    # a required variable missing from the example env file raises here
    assert services(resolved_compose())


CHECKS: dict[str, Callable[[Compose], Problems]] = {
    "services": check_services,
    "airflow_components": check_airflow_components,
    "images": check_images,
    "one_python": check_one_python,
    "metadata_database": check_metadata_database,
    "startup_order": check_startup_order,
    "depends_on": check_depends_on,
    "storage": check_storage,
    "object_store": check_object_store,
    "spark": check_spark,
    "volumes_and_files": check_volumes_and_files,
}


@pytest.mark.parametrize("check", CHECKS.values(), ids=CHECKS.keys())
def test_compose_file(check):
    assert check(resolved_compose()) == []


def test_versions_match_the_lock():
    _, dockerfile = feedpipe_dockerfile(resolved_compose())
    assert check_versions(dockerfile, lock_pins()) == []


def test_every_setting_is_one_feedpipe_reads():
    compose = resolved_compose()
    _, dockerfile = feedpipe_dockerfile(compose)
    assert check_setting_names(compose, dockerfile) == []


def test_credentials_come_from_the_env_file():
    assert check_credentials(raw_compose(), env_example()) == []


# -- the checks do fail ----------------------------------------------------------------------


def service(compose: Compose, name: str) -> dict[str, Any]:
    return services(compose)[name]


def set_env(name: str, key: str, value: str) -> Callable[[Compose], None]:
    def mutate(compose: Compose) -> None:
        env = environment(service(compose, name))
        env[key] = value
        service(compose, name)["environment"] = env

    return mutate


def set_key(name: str, key: str, value: Any) -> Callable[[Compose], None]:
    def mutate(compose: Compose) -> None:
        service(compose, name)[key] = value

    return mutate


def drop_volume_declaration(compose: Compose) -> None:
    compose["volumes"].pop(next(iter(compose["volumes"])))


def drop_service(name: str) -> Callable[[Compose], None]:
    def mutate(compose: Compose) -> None:
        services(compose).pop(name)

    return mutate


SQL_CONN = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
WORKER_TO_LOCALHOST = ["spark-class", "org.apache.spark.deploy.worker.Worker", "spark://localhost"]
BROKEN = [
    ("services", drop_service(SPARK_WORKER)),
    ("airflow_components", set_key("airflow-triggerer", "command", ["airflow", "scheduler"])),
    ("images", set_key(OBJECT_STORE, "image", "quay.io/minio/minio:latest")),
    ("images", set_key(POSTGRES, "image", "postgres")),
    ("images", set_key(SPARK_MASTER, "build", {"context": "..", "dockerfile": "nowhere"})),
    ("one_python", set_key(SPARK_WORKER, "image", "feedpipe:other")),
    ("metadata_database", set_env("airflow-scheduler", SQL_CONN, "postgresql://a:b@localhost/a")),
    ("metadata_database", set_env("airflow-api-server", SQL_CONN, "sqlite:////tmp/airflow.db")),
    ("startup_order", set_key("airflow-dag-processor", "depends_on", [POSTGRES])),
    ("depends_on", set_key(SPARK_WORKER, "depends_on", ["ghost"])),
    ("storage", set_env("airflow-scheduler", "FEEDPIPE_WAREHOUSE", "s3://elsewhere/warehouse")),
    ("storage", set_env("airflow-scheduler", "FEEDPIPE_LANDING", "var/landing")),
    ("object_store", set_env("airflow-scheduler", "FEEDPIPE_S3_ENDPOINT", "http://localhost:9000")),
    ("object_store", set_env(CREATE_BUCKET, "AWS_SECRET_ACCESS_KEY", "another-secret")),
    ("spark", set_key(SPARK_WORKER, "command", WORKER_TO_LOCALHOST)),
    ("spark", set_env("airflow-scheduler", "SPARK_LOCAL_IP", "127.0.0.1")),
    ("spark", set_key(SPARK_WORKER, "deploy", {"replicas": 1})),
    ("volumes_and_files", drop_volume_declaration),
    ("volumes_and_files", set_key("airflow-scheduler", "volumes", ["../no-such-dir:/x:ro"])),
]


@pytest.mark.parametrize(
    ("check", "mutate"), BROKEN, ids=[f"{c}-{i}" for i, (c, _) in enumerate(BROKEN)]
)
def test_check_reports_a_broken_compose_file(check, mutate):
    compose = resolved_compose()
    assert CHECKS[check](compose) == []
    mutate(compose)
    assert CHECKS[check](compose), f"{check} did not notice the change"


def test_version_check_reports_a_lock_that_moved_on():
    _, dockerfile = feedpipe_dockerfile(resolved_compose())
    assert check_versions(dockerfile, {**lock_pins(), "apache-airflow": "3.9.9"})
    assert check_versions(dockerfile, {**lock_pins(), "pyspark": "4.2.0"})


def test_setting_check_reports_a_name_the_code_does_not_read():
    compose = resolved_compose()
    _, dockerfile = feedpipe_dockerfile(compose)
    set_env("airflow-scheduler", "FEEDPIPE_S3_ENDPIONT", "http://minio:9000")(compose)
    assert check_setting_names(compose, dockerfile)


def test_credential_check_reports_a_written_secret():
    raw = copy.deepcopy(raw_compose())
    raw["services"][POSTGRES]["environment"]["POSTGRES_PASSWORD"] = "hunter2"
    assert check_credentials(raw, env_example())
    assert check_credentials(raw_compose(), {})
