//go:build linux && !amd64 && !arm64

package sandbox

// No filter is built for this architecture: Apply refuses without
// BestEffort (Supported says why).
const (
	filterArch      = false
	nativeArch      = 0
	x32Bit          = 0
	sysSocket       = 0
	sysSendto       = 0
	sysSendmsg      = 0
	sysSendmmsg     = 0
	sysIOUringSetup = 0
)
