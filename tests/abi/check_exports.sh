#!/bin/sh
# Every plugin given exports exactly one dynamic symbol: bora_plugin_entry.
# usage: check_exports.sh PLUGIN.so...
set -eu
[ "$#" -gt 0 ] || { echo "no plugins given" >&2; exit 1; }
bad=0
for so in "$@"; do
    syms=$(nm -D --defined-only "$so" | awk '{print $3}' | sort)
    if [ "$syms" != "bora_plugin_entry" ]; then
        echo "$so exports:" $syms >&2
        bad=$((bad + 1))
    else
        echo "$so: bora_plugin_entry only"
    fi
done
[ "$bad" -eq 0 ]
