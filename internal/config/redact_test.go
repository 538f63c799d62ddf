package config

import (
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestRedacted(t *testing.T) {
	c := fullConfig()
	r := c.Redacted()

	out, err := yaml.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"yaml": string(out), "%+v": fmt.Sprintf("%+v", r), "%#v": fmt.Sprintf("%#v", *r)} {
		checkNoSecrets(t, "Redacted "+what, s)
	}

	want := map[string]string{
		"auth.secrets":            "REDACTED,REDACTED",
		"api.keys":                "REDACTED",
		"changefeed.database_url": "postgres://herald:REDACTED@db.internal:5432/app?sslmode=verify-full",
		"listen":                  "0.0.0.0:9090",
		"auth.public_keys":        "/etc/herald/a.pem,/etc/herald/b.pem",
	}
	for key, w := range want {
		if got := mustKey(key).Format(r); got != w {
			t.Errorf("Redacted %s = %q, want %q", key, got, w)
		}
	}
	// Everything that is not a secret is unchanged.
	for _, k := range Keys() {
		if !k.Secret && k.Format(r) != k.Format(c) {
			t.Errorf("Redacted changed %s from %q to %q", k.Name, k.Format(c), k.Format(r))
		}
	}
	// The original is untouched, and the copy shares no list with it.
	if d := diffConfig(fullConfig(), c); d != "" {
		t.Errorf("Redacted changed its receiver (-want +got):\n%s", d)
	}
	r.AuthSection.PublicKeys[0] = "changed"
	r.ChangefeedSection.Tables[0] = "changed"
	if c.AuthSection.PublicKeys[0] == "changed" || c.ChangefeedSection.Tables[0] == "changed" {
		t.Errorf("the Redacted copy shares a list with the original")
	}
	// Empty secrets stay empty, so a printed config shows they are unset.
	d := Default().Redacted()
	if d.AuthSection.Secrets != nil || d.API.Keys != nil || d.ChangefeedSection.DatabaseURL != "" {
		t.Errorf("Redacted default = %+v, want empty secrets left empty", d)
	}
}

func TestRedactURL(t *testing.T) {
	const pw = testDBPass
	tests := []struct {
		name, in, want string
	}{
		{"url", "postgres://herald:" + pw + "@db:5432/app", "postgres://herald:REDACTED@db:5432/app"},
		{"postgresql scheme", "postgresql://herald:" + pw + "@db/app", "postgresql://herald:REDACTED@db/app"},
		{"no password", "postgres://herald@db/app?sslmode=verify-full", "postgres://herald@db/app?sslmode=verify-full"},
		{"no user info", "postgres://db/app", "postgres://db/app"},
		{"empty password", "postgres://herald:@db/app", "postgres://herald:REDACTED@db/app"},
		{"password with @ and /", "postgres://herald:a@b/" + pw + "@db/app", "postgres://herald:REDACTED@db/app"},
		{"password with : and #", "postgres://herald:x:#" + pw + "@db/app", "postgres://herald:REDACTED@db/app"},
		{"password with ?", "postgres://herald:?" + pw + "@db/app", "postgres://herald:REDACTED@db/app"},
		{"malformed escape", "postgres://herald:" + pw + "%zz@db/app", "postgres://herald:REDACTED@db/app"},
		{"password parameter", "postgres://herald@db/app?sslmode=require&password=" + pw + "&x=1", "postgres://herald@db/app?sslmode=require&password=REDACTED&x=1"},
		{"sslpassword parameter", "postgres://db/app?sslpassword=" + pw, "postgres://db/app?sslpassword=REDACTED"},
		{"multiple hosts", "postgres://herald:" + pw + "@db1:5432,db2:5432/app", "postgres://herald:REDACTED@db1:5432,db2:5432/app"},
		{"key=value", "host=db user=herald password=" + pw + " dbname=app", "host=db user=herald password=REDACTED dbname=app"},
		{"key=value spaced", "host=db password = " + pw, "host=db password = REDACTED"},
		{"key=value quoted", "host=db password='a b\\' " + pw + "' dbname=app", "host=db password=REDACTED dbname=app"},
		{"key=value unterminated quote", "host=db password='" + pw, "host=db password=REDACTED"},
		{"key=value sslpassword", "host=db sslpassword=" + pw, "host=db sslpassword=REDACTED"},
		{"not a connection string", pw, "REDACTED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := redactURL(tt.in)
			if got != tt.want {
				t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if strings.Contains(got, pw) {
				t.Errorf("redactURL(%q) = %q still holds the password", tt.in, got)
			}
		})
	}
}
