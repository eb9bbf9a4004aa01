package main

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The Linux POSIX ACL extended attribute (system.posix_acl_access): a
// version, then entries of tag, permission and id, in tag order.
const (
	aclVersion   = 2
	aclUserObj   = 0x01
	aclUser      = 0x02
	aclGroupObj  = 0x04
	aclMask      = 0x10
	aclOther     = 0x20
	aclRead      = 4
	aclWrite     = 2
	aclNoID      = 0xFFFFFFFF
	aclAttribute = "system.posix_acl_access"
)

// seedACL is the ACL of a seed uid may read: its owner reads and writes,
// uid reads, nobody else anything (the mode 0600 plus one reader).
func seedACL(uid int) []byte {
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{
		{aclUserObj, aclRead | aclWrite, aclNoID},
		{aclUser, aclRead, uint32(uid)},
		{aclGroupObj, 0, aclNoID},
		{aclMask, aclRead, aclNoID},
		{aclOther, 0, aclNoID},
	} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

func grantReadACL(path string, uid int) error {
	err := unix.Setxattr(path, aclAttribute, seedACL(uid), 0)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%s: %w", path, errors.ErrUnsupported)
	}
	if err != nil {
		return fmt.Errorf("set an ACL on %s: %w", path, err)
	}
	return nil
}
