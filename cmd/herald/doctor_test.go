package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctorExitStatus: warnings alone exit 0, a failed check 1, a usage error 2; --json
// writes one object a line and keeps stdout free of anything else.
func TestDoctorExitStatus(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	warnOnly := write("warn.yaml", "listen: \":0\"\nauth: {allow_anonymous: true}\npolicy:\n  channels:\n    \"**\": {subscribe: \"true\"}\n")
	typo := write("typo.yaml", "auth: {allow_anonymous: true}\nlistn: 127.0.0.1:8080\n")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"warnings only", []string{"doctor", "--config", warnOnly}, 0, []string{"WARN  config.listen", "0 failed"}, nil},
		{"a failed check", []string{"doctor", "--config", typo}, 1, []string{"FAIL  config.keys listn", "fix: did you mean listen?"}, []string{"herald doctor: 0 ok, 0 warnings, 1 failed"}},
		{"json", []string{"doctor", "--json", "--config", typo}, 1, []string{`"id":"config.keys"`, `"status":"fail"`}, nil},
		{"unknown flag", []string{"doctor", "--jsn"}, 2, nil, []string{"flag provided but not defined"}},
		{"an argument", []string{"doctor", "extra"}, 2, nil, []string{"unexpected argument"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.code {
				t.Errorf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.code, stdout.String(), stderr.String())
			}
			for _, s := range tt.stdout {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
			if tt.name == "json" {
				for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
					var m map[string]any
					if err := json.Unmarshal([]byte(line), &m); err != nil {
						t.Errorf("stdout line %q is not JSON: %v", line, err)
					}
				}
			}
		})
	}
}
