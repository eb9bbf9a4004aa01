package testkit

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// SlowPost is an HTTP POST whose body arrives slowly, the way a sender that
// means to hold a server's memory sends it: it announces a Content-Length,
// sends a first burst of the body, then a few bytes at a time on a timer,
// until the body is done, the server answers or closes, or Stop.
type SlowPost struct {
	conn   net.Conn
	sent   atomic.Int64
	stop   chan struct{}
	once   sync.Once
	answer chan slowAnswer
}

type slowAnswer struct {
	status int
	err    error
}

// StartSlowPost dials the server of rawURL and posts to its path with
// header, announcing length bytes: first bytes at once, then step bytes
// every interval.
func StartSlowPost(rawURL string, header http.Header, length int64, first, step int, every time.Duration) (*SlowPost, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		return nil, err
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", u.RequestURI(), u.Host, length)
	if err := header.Write(&head); err != nil {
		conn.Close()
		return nil, err
	}
	head.WriteString("\r\n")
	p := &SlowPost{conn: conn, stop: make(chan struct{}), answer: make(chan slowAnswer, 1)}
	first = int(min(int64(first), length))
	if _, err := conn.Write(append(head.Bytes(), bytes.Repeat([]byte{'x'}, first)...)); err != nil {
		conn.Close()
		return nil, err
	}
	p.sent.Store(int64(first))
	go p.trickle(length, step, every)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			p.answer <- slowAnswer{err: err}
			return
		}
		resp.Body.Close()
		p.answer <- slowAnswer{status: resp.StatusCode}
	}()
	return p, nil
}

func (p *SlowPost) trickle(length int64, step int, every time.Duration) {
	chunk := bytes.Repeat([]byte{'x'}, step)
	t := time.NewTicker(every)
	defer t.Stop()
	for p.sent.Load() < length {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		n := min(int64(step), length-p.sent.Load())
		if _, err := p.conn.Write(chunk[:n]); err != nil {
			return
		}
		p.sent.Add(n)
	}
}

// Sent is the bytes of the body sent so far.
func (p *SlowPost) Sent() int64 { return p.sent.Load() }

// Wait returns the status the server answered, or the error that ended the
// connection without an answer, or an error once d passes.
func (p *SlowPost) Wait(d time.Duration) (int, error) {
	select {
	case a := <-p.answer:
		p.answer <- a
		return a.status, a.err
	case <-time.After(d):
		return 0, fmt.Errorf("no answer within %s", d)
	}
}

// Stop stops sending and closes the connection.
func (p *SlowPost) Stop() {
	p.once.Do(func() {
		close(p.stop)
		p.conn.Close()
	})
}
