"""Keeps the audit lines of one experiment run: writes (create, update, patch,
delete, deletecollection) in the run's namespace, unedited, up to the end
marker. Reads stdin, writes OUT (gzip), prints how many lines it kept.

    slice.py NAMESPACE MARKER OUT.audit.log.gz
"""
import gzip
import json
import sys

WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: slice.py NAMESPACE MARKER OUT.audit.log.gz")
    namespace, marker, out = sys.argv[1:]
    kept = 0
    with gzip.open(out, "wt") as sink:
        for number, line in enumerate(sys.stdin, 1):
            if not line.strip() or marker in line:
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as err:
                sys.exit(f"audit line {number} (after the run's start offset) is not JSON: {err}")
            ref = event.get("objectRef") or {}
            if event.get("verb") in WRITES and ref.get("namespace") == namespace:
                sink.write(line if line.endswith("\n") else line + "\n")
                kept += 1
    print(kept)


if __name__ == "__main__":
    main()
