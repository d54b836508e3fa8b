package api

import (
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
)

// Declarations is the body of GET /v1/env for ds; `env list --json`
// prints the same.
func Declarations(ds []overlay.Declaration) types.DeclarationsResponse {
	return types.DeclarationsResponse{Declarations: declarations(ds)}
}

func declarations(ds []overlay.Declaration) []types.Declaration {
	out := make([]types.Declaration, 0, len(ds))
	for _, d := range ds {
		out = append(out, types.Declaration{Key: d.Key, Owner: d.Owner, Description: d.Description, BuiltIn: d.BuiltIn})
	}
	return out
}
