# A hook script of the kind users already have: it reads the payload on
# stdin, opens the transcript when there is one, and prints what it read.
# reader.sh prints exactly the same lines; tests compare the two.
import json
import sys

p = json.load(sys.stdin)
path = p.get("transcript_path") or ""
command = (p.get("tool_input") or {}).get("command", "")
print("session_id=" + (p.get("session_id") or ""))
print("tool_name=" + (p.get("tool_name") or ""))
print("command=" + command)
print("transcript_path=" + path)
try:
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
except (FileNotFoundError, IsADirectoryError):
    print("transcript=absent")
else:
    header = lines[0] if lines else {}
    types = ",".join(e.get("type", "") for e in lines[1:])
    print("transcript=%d lines header=%s events=%s" % (len(lines), header.get("id", ""), types))
