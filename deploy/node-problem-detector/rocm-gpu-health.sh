#!/bin/sh
# node-problem-detector custom plugin: the node's GPU health as rocm-watchdog decided it (docs/gpu-health.md).
#
# Reads the verdict file the rocm-watchdog daemon on this node writes atomically into its state directory
# (default /var/lib/rocm-watchdog/gpu-health; NPD's pod mounts that hostPath read-only). It never opens a device
# and never judges with the calling container's access: NPD's container has neither the GPUs nor Python.
#
# Exit status (NPD's plugin protocol): 0 every GPU healthy (OK), 1 a GPU unhealthy (NonOK), 2 no verdict:
# the file is missing, unreadable, malformed, older than the max_age_seconds it states (the daemon stopped)
# or stamped in the future by more than that, or a GPU is unknown (Unknown). One line of output, at most 80
# characters (NPD's default max_output_length). POSIX sh and date(1) only.

file=${1:-/var/lib/rocm-watchdog/gpu-health}

say() {
    printf '%.80s\n' "$1"
}

if [ ! -f "$file" ] || [ ! -r "$file" ]; then
    say "no verdict file $file (is rocm-watchdog running?)"
    exit 2
fi

format='' written='' max_age='' node='' message=''
while IFS=' ' read -r key value; do
    case $key in
        format) format=$value ;;
        written) written=$value ;;
        max_age_seconds) max_age=$value ;;
        node) node=$value ;;
        message) message=$value ;;
    esac
done <"$file"

number() {
    case $1 in
        '' | *[!0-9]*) return 1 ;;
    esac
    return 0
}

if [ "$format" != 1 ] || ! number "$written" || ! number "$max_age"; then
    say "unreadable verdict file $file (format ${format:-none})"
    exit 2
fi
now=$(date +%s 2>/dev/null)
if ! number "$now"; then
    say "cannot read the clock (date +%s)"
    exit 2
fi
age=$((now - written))
if [ "$age" -gt "$max_age" ]; then
    say "verdict is ${age}s old (max ${max_age}s): rocm-watchdog stopped?"
    exit 2
fi
if [ "$age" -lt "-$max_age" ]; then
    say "verdict is stamped $((-age))s in the future: check the clock"
    exit 2
fi
case $node in
    healthy)
        say "${message:-all GPUs healthy}"
        exit 0
        ;;
    unhealthy)
        say "${message:-a GPU is unhealthy}"
        exit 1
        ;;
    *)
        say "${message:-GPU health unknown}"
        exit 2
        ;;
esac
