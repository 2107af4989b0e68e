"""Pure functions from observations (and the previous ones) to signals, worst first."""

from service.models import SEVERITY_ORDER, Observations, Signal

LOG_SILENT_AFTER_S = 120.0
IDLE_CPU_PERCENT = 1.0


def derive(current: Observations, previous: Observations | None) -> list[Signal]:
    signals = [
        *exited_processes(current, previous),
        *idle_processes(current),
        *expected_ports(current),
        *silent_logs(current),
        *unavailable_watches(current),
    ]
    return sorted(signals, key=lambda s: SEVERITY_ORDER[s.severity])


def exited_processes(current: Observations, previous: Observations | None) -> list[Signal]:
    if previous is None:
        return []
    alive = {p.key for p in current.processes.items}
    return [
        Signal(
            severity="critical" if p.root else "warning",
            code="process_exited",
            subject=p.key,
            text=f"process {p.pid} ({p.name}) exited since the previous snapshot",
        )
        for p in previous.processes.items
        if p.key not in alive
    ]


def idle_processes(current: Observations) -> list[Signal]:
    """Many idle workers say "stuck" louder than one row each: group them."""
    procs = [p for p in current.processes.items if p.cpu_percent is not None]
    idle = [p for p in procs if p.cpu_percent is not None and p.cpu_percent < IDLE_CPU_PERCENT]
    if not procs or not idle:
        return []
    if len(idle) == len(procs):
        text = f"all {len(procs)} watched processes alive at <{IDLE_CPU_PERCENT:g}% CPU"
        return [Signal(severity="warning", code="all_idle", subject="processes", text=text)]
    return []


def expected_ports(current: Observations) -> list[Signal]:
    signals = []
    for port in current.ports.items:
        where = f"{port.host}:{port.port}"
        if not port.listening:
            who = f" (expected by watch {port.expected_by})" if port.expected_by else ""
            signals.append(
                Signal(
                    severity="critical",
                    code="port_closed",
                    subject=where,
                    text=f"{where} not listening{who}",
                )
            )
        elif port.health_error or (port.health_status is not None and port.health_status >= 400):
            why = port.health_error or f"HTTP {port.health_status}"
            signals.append(
                Signal(
                    severity="warning",
                    code="health_failed",
                    subject=where,
                    text=f"{port.url}: {why}",
                )
            )
    return signals


def silent_logs(current: Observations) -> list[Signal]:
    signals = []
    for log in current.logs.items:
        if log.silent_for_s < LOG_SILENT_AFTER_S:
            continue
        last = log.lines[-1].strip() if log.lines else ""
        tail = f"; last line: {last[:120]}" if last else ""
        signals.append(
            Signal(
                severity="warning",
                code="log_silent",
                subject=log.path,
                text=f"log {log.path} silent for {human_duration(log.silent_for_s)}{tail}",
            )
        )
    return signals


def unavailable_watches(current: Observations) -> list[Signal]:
    sections = (current.processes, current.logs, current.artifacts, current.ports)
    return [
        Signal(
            severity="warning",
            code="unavailable",
            subject=u.target,
            text=f"{u.target}: {u.reason}",
        )
        for section in sections
        for u in section.unavailable
    ]


def human_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"
