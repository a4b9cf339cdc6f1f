// Package daemonset reads the Kubernetes manifests mcptrace ships
// (deploy/kubernetes, a kustomize base) the way a cluster would: it
// renders the base with kustomize's own library and decodes every object
// strictly (no unknown or duplicate field) into the Kubernetes API types.
// It also turns the DaemonSet's pod into the `docker run` arguments that
// give a container the same privileges and mounts, so that the docker
// tests run the image exactly as the DaemonSet declares it: one source of
// truth, the YAML.
//
// It does not validate objects as an API server does (no admission, no
// defaults, no server-side checks beyond the types' fields), and it
// translates only what the shipped DaemonSet uses: anything else in the
// pod is an error, never silently dropped. Only tests import it; the agent
// does not.
package daemonset
