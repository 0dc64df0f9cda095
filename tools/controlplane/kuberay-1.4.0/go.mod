module github.com/ray-efa-stack/controlplane/kuberay-1.4.0

go 1.26.0

require github.com/ray-project/kuberay/ray-operator v1.4.0
