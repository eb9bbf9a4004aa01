package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// servicesUID is the uid the services' containers run as (deploy/Dockerfile,
// docker-compose.yml, the Kubernetes base): compose bind-mounts each seed
// as it is on disk, so that uid must be able to read it.
const servicesUID = 65532

// parseReader reads --reader: a uid, or "none".
func parseReader(s string) (uid int, ok bool, err error) {
	if s == "none" || s == "" {
		return 0, false, nil
	}
	uid, err = strconv.Atoi(s)
	if err != nil || uid < 0 {
		return 0, false, fmt.Errorf("%w: --reader %q: a uid, or none", errUsage, s)
	}
	return uid, true, nil
}

// grantRead lets uid read the seed at path without taking it from its
// owner: a POSIX ACL entry (the owner may set one without privilege), or,
// on a file system without ACLs, a chown to uid when this process may
// (root). It says how it did, or why it could not.
func grantRead(path string, uid int) (how string, err error) {
	aclErr := grantReadACL(path, uid)
	if aclErr == nil {
		return "acl", nil
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(path, uid, -1); err != nil {
			return "", fmt.Errorf("chown %s: %w", path, err)
		}
		return "chown", nil
	}
	if errors.Is(aclErr, errors.ErrUnsupported) {
		return "", fmt.Errorf("this file system has no POSIX ACLs, and only root may chown")
	}
	return "", aclErr
}
