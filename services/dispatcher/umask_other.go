//go:build !unix

package dispatcher

func groupWritable() {}
