//go:build !linux

package server

import "time"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not Linux's: a vanished peer is found
// by the pings, or by the kernel's retransmissions giving up.
func setUserTimeout(uintptr, time.Duration) error { return nil }
