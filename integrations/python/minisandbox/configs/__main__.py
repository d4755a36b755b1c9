import sys

from . import CONFIGS, config_path

if len(sys.argv) != 2 or sys.argv[1] not in CONFIGS:
    sys.stderr.write(f"usage: python -m minisandbox.configs {{{','.join(sorted(CONFIGS))}}}\n")
    sys.exit(2)
print(config_path(sys.argv[1]))
