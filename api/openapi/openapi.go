// Package openapi embeds the OpenAPI document generated from the façade's
// protos (saltbush.swagger.json, written by protoc-gen-openapiv2), so the
// server can serve it. This file is hand-written; the JSON is generated.
package openapi

import _ "embed"

// Document is the generated OpenAPI 2 document of the façade.
//
//go:embed saltbush.swagger.json
var Document []byte
