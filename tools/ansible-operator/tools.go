//go:build tools

// Package tools pins the ansible-operator command this module builds, so `go mod tidy` keeps its dependencies.
package tools

import _ "github.com/operator-framework/ansible-operator-plugins/cmd/ansible-operator"
