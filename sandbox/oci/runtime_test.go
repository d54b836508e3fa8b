package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDelete is a stand-in runtime for the logic of remove: `delete`
// fails its first $FAILS runs (with the message runsc gives for a state
// file read while it is rewritten) and then removes the container's
// state directory; every other subcommand succeeds. Its runs are counted
// in the state root.
const fakeDelete = `#!/bin/sh
root=$2
for a; do id=$a; done
case " $* " in
*" delete "*)
	n=$(cat "$root/deletes" 2>/dev/null || echo 0)
	n=$((n + 1))
	echo "$n" > "$root/deletes"
	if [ "$n" -le FAILS ]; then
		echo "loading container: reading container metadata file: unexpected end of JSON input" >&2
		exit 128
	fi
	rm -rf "$root/$id"
	;;
esac
exit 0
`

// fakeRuntime writes script as a stand-in runtime into a new directory
// and returns it with its state root, which exists.
func fakeRuntime(t *testing.T, script string) (*runtimeCLI, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "runtime")
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	return &runtimeCLI{name: RuntimeRunc, path: bin, root: root}, root
}

// TestRemoveRetriesDelete: a delete that fails while the container's
// state remains is run again, up to deleteAttempts times; the container
// is then gone and remove succeeds. A delete that fails every time is
// reported with the runtime's message after deleteAttempts runs.
func TestRemoveRetriesDelete(t *testing.T) {
	for _, tc := range []struct {
		fails       int
		wantErr     bool
		wantDeletes string
	}{
		{0, false, "1"},
		{deleteAttempts - 1, false, "3"},
		{deleteAttempts, true, "3"},
	} {
		r, root := fakeRuntime(t, strings.Replace(fakeDelete, "FAILS", string(rune('0'+tc.fails)), 1))
		id := "call-00000000000000000000000e"
		if err := os.Mkdir(filepath.Join(root, id), 0o700); err != nil {
			t.Fatal(err)
		}
		err := r.remove(t.Context(), id)
		if (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), "unexpected end of JSON input")) {
			t.Errorf("remove() with %d failed deletes = %v, want error %v (naming the runtime's message)", tc.fails, err, tc.wantErr)
		}
		if data, _ := os.ReadFile(filepath.Join(root, "deletes")); strings.TrimSpace(string(data)) != tc.wantDeletes {
			t.Errorf("remove() with %d failed deletes ran delete %q times, want %s", tc.fails, strings.TrimSpace(string(data)), tc.wantDeletes)
		}
		if _, err := os.Stat(filepath.Join(root, id)); (err == nil) != tc.wantErr {
			t.Errorf("container state after remove() with %d failed deletes: %v", tc.fails, err)
		}
	}
}

// fakeList is a stand-in runtime for the logic of list: `list` fails
// its first $FAILS runs with the message in the state root's file
// "message" (runc 1.1's, for a container whose state directory was
// removed while it listed, or another) and then prints an empty list.
// Its runs are counted in the state root.
const fakeList = `#!/bin/sh
root=$2
case " $* " in
*" list "*)
	n=$(cat "$root/lists" 2>/dev/null || echo 0)
	n=$((n + 1))
	echo "$n" > "$root/lists"
	if [ "$n" -le FAILS ]; then
		cat "$root/message" >&2
		exit 1
	fi
	echo "[]"
	;;
esac
exit 0
`

// TestListRetriesVanishedContainer: a list that fails because a
// container's state directory went away while it listed is run again,
// up to listAttempts times; any other failure is reported at once, with
// the runtime's message.
func TestListRetriesVanishedContainer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fails     int
		vanished  bool
		wantErr   bool
		wantLists string
	}{
		{"clean", 0, true, false, "1"},
		{"vanished-then-clean", listAttempts - 1, true, false, "3"},
		{"vanished-every-time", listAttempts, true, true, "3"},
		{"other-failure", 1, false, true, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The message names the state root, which fakeRuntime makes:
			// the script reads it from a file there.
			r, root := fakeRuntime(t, strings.Replace(fakeList, "FAILS", string(rune('0'+tc.fails)), 1))
			msg := "permission denied"
			if tc.vanished {
				msg = "stat " + filepath.Join(root, "call-00000000000000000000000e") + ": no such file or directory"
			}
			if err := os.WriteFile(filepath.Join(root, "message"), []byte(msg), 0o600); err != nil {
				t.Fatal(err)
			}
			all, err := r.list(t.Context())
			if (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), msg)) || (err == nil && len(all) != 0) {
				t.Errorf("list() = %v, %v; want error %v (naming the runtime's message) or an empty list", all, err, tc.wantErr)
			}
			if data, _ := os.ReadFile(filepath.Join(root, "lists")); strings.TrimSpace(string(data)) != tc.wantLists {
				t.Errorf("list ran %q times, want %s", strings.TrimSpace(string(data)), tc.wantLists)
			}
		})
	}
}
