// Package deploy holds the deployment files — the container image
// (Dockerfile), the NATS config, the Kubernetes manifests (k8s/) — and the
// tests that validate them statically, since no Docker engine or cluster runs
// where the tests do: the compose file loads with compose-go (the library
// Docker Compose uses), every kustomize overlay renders and every object
// decodes strictly into the Kubernetes API types, and what the files name
// (commands, settings, ports, probes) agrees with what `the-loop serve` reads.
package deploy
