//go:build tools

// The KubeRay operator (github.com/ray-project/kuberay/ray-operator's main package) at the newest version the Go
// module proxy serves; its own module, so that its Kubernetes client libraries need not agree with the API server's.
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
