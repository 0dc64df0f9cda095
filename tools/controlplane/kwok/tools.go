//go:build tools

// KWOK's controller (sigs.k8s.io/kwok/cmd/kwok): it plays the kubelet for nodes that are only API objects, so pods
// bound to them report the status a kubelet would. Its own module, like the operator's.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
