//go:build tools

// cyclonus (github.com/mattfenwick/cyclonus/cmd/cyclonus): `cyclonus analyze --mode query-traffic` evaluates
// NetworkPolicies, ingress and egress, for given source and destination pods or IPs, as a conforming CNI would,
// without a cluster. tests/cluster/netpol.py asks it what the stack's policies let through.
package tools

import _ "github.com/mattfenwick/cyclonus/cmd/cyclonus"
