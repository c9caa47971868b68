"""Container facts: docker and its runtimes, /etc/docker/daemon.json, the NVIDIA Container Toolkit
(``nvidia-container-cli info``)."""

from __future__ import annotations

import re

from gpuledger.facts.fs import RootFS
from gpuledger.facts.model import CommandFact, ContainerFacts, NvidiaContainerDevice, NvidiaContainerInfo
from gpuledger.facts.runner import Runner
from gpuledger.facts.tool_output import ToolOutputError, bounded_text, load_json


def parse_docker_runtimes(text: str) -> list[str] | None:
    """``docker info --format '{{json .Runtimes}}'`` -> runtime names (None when not a JSON object)."""
    try:
        doc = load_json(text.strip() or "null", "docker info")
    except ToolOutputError:
        return None
    if not isinstance(doc, dict):
        return None
    return sorted(str(k) for k in doc)


def parse_nvidia_container_info(text: str) -> NvidiaContainerInfo | None:
    """``nvidia-container-cli info``: ``NVRM version:``, ``CUDA version:`` and one block per device."""
    info = NvidiaContainerInfo()
    device: NvidiaContainerDevice | None = None
    seen = False
    for line in bounded_text(text).splitlines():
        match = re.match(r"^([A-Za-z][A-Za-z ]{0,63}?):\s+(.*?)\s*$", line)
        if match is None:
            continue
        key, value = match.group(1), match.group(2)
        clean = None if value in ("", "(null)") else value
        if key == "NVRM version":
            info.nvrm_version, seen = clean, True
        elif key == "CUDA version":
            info.cuda_version, seen = clean, True
        elif key == "Device Index":
            device = NvidiaContainerDevice(index=int(value) if value.isdigit() else None)
            info.devices.append(device)
        elif device is not None and key == "Model":
            device.model = clean
        elif device is not None and key == "GPU UUID":
            device.uuid = clean
        elif device is not None and key == "Bus Location":
            device.bus_location = clean
        elif device is not None and key == "Architecture":
            device.architecture = clean
    return info if seen else None


def collect_containers(fs: RootFS, runner: Runner) -> ContainerFacts:
    facts = ContainerFacts()
    daemon = fs.read("etc/docker/daemon.json")
    if daemon.ok and daemon.text is not None:
        try:
            doc = load_json(daemon.text, "daemon.json")
            if isinstance(doc, dict):
                runtimes = doc.get("runtimes")
                facts.daemon_json_runtimes = sorted(runtimes) if isinstance(runtimes, dict) else []
                default = doc.get("default-runtime")
                facts.daemon_json_default_runtime = default if isinstance(default, str) else None
            else:
                facts.daemon_json_error = "not a JSON object"
        except ToolOutputError as exc:
            facts.daemon_json_error = str(exc).replace("daemon.json JSON ", "", 1)
    elif not daemon.missing:
        facts.daemon_json_error = daemon.error

    docker = runner(["docker", "info", "--format", "{{json .Runtimes}}"], timeout_s=5.0)
    facts.docker_found = not docker.not_found
    if facts.docker_found:
        facts.docker_info = CommandFact.from_result(docker)
        facts.docker_runtimes = parse_docker_runtimes(docker.stdout) if docker.ok else None
        if facts.docker_runtimes is None:
            facts.docker_error = (docker.stderr.strip().splitlines() or [docker.summary()])[0][:300]

    cli = runner(["nvidia-container-cli", "info"], timeout_s=10.0)
    facts.nvidia_container_cli_found = not cli.not_found
    if facts.nvidia_container_cli_found:
        facts.nvidia_container_cli = CommandFact.from_result(cli)
        if cli.ok:
            facts.nvidia_container_info = parse_nvidia_container_info(cli.stdout)
    facts.nvidia_ctk_found = runner(["nvidia-ctk", "--version"], timeout_s=5.0).ran
    return facts
