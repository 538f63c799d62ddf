package server

import (
	"log/slog"

	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/config"
	"github.com/heraldrt/herald/internal/session"
)

// ConfigFrom maps a loaded config file onto the server's Config.
func ConfigFrom(c *config.Config, log *slog.Logger) Config {
	var cf *changefeed.Config
	if c.ChangefeedEnabled() {
		fc := c.Changefeed()
		fc.Logger = log
		cf = &fc
	}
	return Config{
		Changefeed:      cf,
		Listen:          c.Listen,
		AdminListen:     c.AdminListen,
		ListenBacklog:   c.Limits.ListenBacklog,
		FDReserve:       c.Limits.FDReserve,
		ShutdownTimeout: c.ShutdownTimeout,
		APIKeys:         c.API.Keys,
		MaxConnections:  c.Limits.MaxConnections,
		MaxPublishBytes: int(c.Limits.MaxPublishBytes),
		ConnectTimeout:  c.Limits.HandshakeTimeout,
		PingInterval:    c.Limits.PingInterval,
		Session: session.Config{
			MaxSubscriptions: c.Limits.MaxSubscriptions,
			MaxFrameBytes:    int(c.Limits.MaxFrameBytes),
			SlowTimeout:      c.Limits.SlowTimeout,
			PingInterval:     c.Limits.PingInterval,
			ClientPublish:    c.Channels.ClientPublish,
			Lanes:            c.Lanes(),
			Logger:           log,
		},
		Auth:         c.Auth(),
		Policy:       c.Policy(),
		PolicyConfig: c.PolicyConfig(),
		Presence:     c.PresenceConfig(),
		Fanout:       c.FanoutConfig(),
		Logger:       log,
	}
}
