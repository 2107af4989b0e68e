"""Process helpers of the collectors: the process table, rows, trees, stacks, relaunch."""
