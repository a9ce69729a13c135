//go:build tools

// Package tools pins the Kyverno command this module builds, so `go mod tidy` keeps its dependencies.
package tools

import _ "github.com/kyverno/kyverno/cmd/kyverno"
