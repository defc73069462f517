#!/bin/sh
# make bench / make bench-quick: the harness is bash; see bench/README.md.
exec bash "$(dirname "$0")/run.bash" "$@"
