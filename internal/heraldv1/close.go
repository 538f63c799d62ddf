package heraldv1

import (
	"time"

	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
)

// closeCodes maps each reason a session ends for to herald.v1's close code of the same name.
var closeCodes = map[session.CloseReason]wire.CloseCode{
	session.CloseNormal:        wire.CloseNormal,
	session.CloseFrameTooLarge: wire.CloseFrameTooLarge,
	session.CloseInternal:      wire.CloseInternal,
	session.CloseShuttingDown:  wire.CloseShuttingDown,
	session.CloseTooSlow:       wire.CloseTooSlow,
	session.ClosePingTimeout:   wire.ClosePingTimeout,
	session.CloseTokenExpired:  wire.CloseTokenExpired,
	session.CloseBadFrame:      wire.CloseBadFrame,
	session.ClosePolicy:        wire.ClosePolicy,
}

// closeReasons is closeCodes the other way.
var closeReasons = func() map[wire.CloseCode]session.CloseReason {
	m := make(map[wire.CloseCode]session.CloseReason, len(closeCodes))
	for r, c := range closeCodes {
		m[c] = r
	}
	return m
}()

// CloseCode is herald.v1's close code for a session that ended for r: 1011 (internal) for a
// reason this version does not know.
func CloseCode(r session.CloseReason) wire.CloseCode {
	if c, ok := closeCodes[r]; ok {
		return c
	}
	return wire.CloseInternal
}

// reasonOf is the reason a herald.v1 close code names: internal for one a session does not end
// for.
func reasonOf(c wire.CloseCode) session.CloseReason {
	if r, ok := closeReasons[c]; ok {
		return r
	}
	return session.CloseInternal
}

// Carrier is a transport of herald.v1: it writes the session's frames, and closes with
// herald.v1's close codes, which it also uses before a session exists (a refused connect).
type Carrier interface {
	Write(deadline time.Time, items []delivery.Item) error
	Close(code wire.CloseCode, reason string)
}

// Transport is c as the session's Transport: the session's close reasons become herald.v1's
// close codes.
func Transport(c Carrier) session.Transport { return carrier{c} }

type carrier struct{ Carrier }

func (c carrier) Close(r session.CloseReason, msg string) { c.Carrier.Close(CloseCode(r), msg) }
