package bus

import (
	"errors"
	"time"
)

// permanentError marks a handler error that no retry can fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the runner copies the message to the DLQ
// and terminates it at once instead of retrying (decision 017: 404, 410, 422).
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or one it wraps) was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// retryError asks for a redelivery after a given delay.
type retryError struct {
	err   error
	delay time.Duration
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// Retry asks the runner to redeliver the message after delay (for example a
// GitHub Retry-After) rather than after its backoff. The partition stays
// blocked meanwhile, which keeps the work item's order. Retry(nil, d) is nil.
func Retry(err error, delay time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryError{err: err, delay: delay}
}

// RetryDelay returns the delay requested with Retry, if any.
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryError
	if errors.As(err, &r) {
		return r.delay, true
	}
	return 0, false
}
