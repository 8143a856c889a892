"""`python -m vitc ...` and the `vitc` command that `pip install` puts on PATH:
the package's own vitc binary (vitc.CLI_PATH) run in this process's place,
with the same arguments, standard streams and exit code."""
import os
import sys

from ._runtime import CLI_PATH


def main() -> None:
    if not os.access(CLI_PATH, os.X_OK):
        sys.stderr.write(f"vitc: the vitc binary {CLI_PATH} is missing; reinstall the package\n")
        sys.exit(3)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(CLI_PATH, ["vitc"] + sys.argv[1:])


if __name__ == "__main__":
    main()
