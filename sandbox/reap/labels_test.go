package reap

import (
	"maps"
	"testing"
)

func TestLabels(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]string
		want  map[string]string
	}{
		{"no extra", nil, map[string]string{
			LabelOwner: "dsh-sandbox", LabelInstance: "i1", LabelExecution: "call-1", LabelSession: "s1",
		}},
		{"extra kept", map[string]string{"team": "infra"}, map[string]string{
			LabelOwner: "dsh-sandbox", LabelInstance: "i1", LabelExecution: "call-1", LabelSession: "s1", "team": "infra",
		}},
		{"reserved keys in extra cannot forge", map[string]string{
			LabelOwner: "someone-else", LabelSession: "other-session", "DSH-SANDBOX.instance": "x", "dsh-sandbox.custom": "y",
		}, map[string]string{
			LabelOwner: "dsh-sandbox", LabelInstance: "i1", LabelExecution: "call-1", LabelSession: "s1",
		}},
	}
	for _, tt := range tests {
		extra := maps.Clone(tt.extra)
		got := Labels("i1", "call-1", "s1", tt.extra)
		if !maps.Equal(got, tt.want) {
			t.Errorf("Labels(%s) = %v, want %v", tt.name, got, tt.want)
		}
		if !maps.Equal(extra, tt.extra) {
			t.Errorf("Labels(%s) modified extra", tt.name)
		}
	}
	if got := Labels("i", "c", "", nil); got[LabelSession] != "" || len(got) != 4 {
		t.Errorf("Labels with no session = %v, want an empty session label", got)
	}
}
