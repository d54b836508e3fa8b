package api

import _ "embed"

// OpenAPI is the checked-in OpenAPI 3 description of the /v1 API, served
// at GET /v1/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
