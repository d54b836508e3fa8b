# The bash + jq twin of reader.py: same input, same output lines.
set -euo pipefail
p=$(cat)
path=$(jq -r '.transcript_path // ""' <<<"$p")
echo "session_id=$(jq -r '.session_id // ""' <<<"$p")"
echo "tool_name=$(jq -r '.tool_name // ""' <<<"$p")"
echo "command=$(jq -r '.tool_input.command // ""' <<<"$p")"
echo "transcript_path=$path"
if [ -n "$path" ] && [ -f "$path" ]; then
	n=$(jq -s 'length' "$path")
	id=$(jq -rs '.[0].id // ""' "$path")
	types=$(jq -rs '[.[1:][] | .type] | join(",")' "$path")
	echo "transcript=$n lines header=$id events=$types"
else
	echo "transcript=absent"
fi
