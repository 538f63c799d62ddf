package interest

import (
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg Config
		ok  bool
	}{
		"zero is the default":              {Config{}, true},
		"short TTL":                        {Config{TTL: time.Millisecond}, false},
		"negative TTL":                     {Config{TTL: -time.Second}, false},
		"generation shorter than rows":     {Config{TTL: time.Hour, GenerationTTL: time.Minute}, false},
		"generation shorter than default":  {Config{GenerationTTL: time.Second}, false},
		"negative limit":                   {Config{MaxPerIdentity: -1}, false},
		"explicit and consistent settings": {Config{TTL: time.Second, GenerationTTL: time.Hour, MaxPerIdentity: 5}, true},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
			}
		})
	}
	d := Config{}.WithDefaults()
	if d.TTL != DefaultTTL || d.GenerationTTL != DefaultGenerationTTL || d.MaxPerIdentity != DefaultMaxPerIdentity {
		t.Fatalf("WithDefaults = %+v", d)
	}
}
