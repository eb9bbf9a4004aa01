//go:build !linux

package sandbox

// Supported reports ErrUnsupported: Landlock is Linux's.
func Supported() error { return ErrUnsupported }

// ABI is 0: no Landlock here.
func ABI() int { return 0 }

// Apply refuses (ErrUnsupported) unless p.BestEffort, with which it does
// nothing: there is no Landlock here.
func Apply(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.BestEffort {
		return nil
	}
	return ErrUnsupported
}

func confineThread(p Policy) error { return Apply(p) }
