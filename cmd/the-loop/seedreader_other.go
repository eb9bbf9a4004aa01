//go:build !linux

package main

import (
	"errors"
	"fmt"
)

func grantReadACL(path string, _ int) error {
	return fmt.Errorf("%s: %w", path, errors.ErrUnsupported)
}
