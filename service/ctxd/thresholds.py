"""The thresholds that turn a reading into a signal, in one place (settings may override some)."""

# Under this CPU % a process counts as idle (the sampler's idle clock and the all_idle signal).
IDLE_CPU_PERCENT = 1.0
# A log with no write for this long is silent.
LOG_SILENT_AFTER_S = 120.0
# A tree idle this long, with evidence it should not be, is stuck (settings.stuck_after_s wins).
STUCK_AFTER_S = 120.0
# GPU memory held at 0 % utilisation from this much on is worth a warning.
GPU_HELD_BYTES = 1024**3
# Resident memory growing steadily at this rate or more.
MEMORY_GROWTH_BPS = 1024**2
# ... over at least this long: a start-up (weights loading) is not a leak
MEMORY_GROWTH_WINDOW_S = 60.0
# A disk is nearly full under either bound; under 1 % free it is critical.
DISK_FREE_RATIO = 0.05
DISK_FREE_BYTES = 2 * 1024**3
DISK_CRITICAL_RATIO = 0.01
