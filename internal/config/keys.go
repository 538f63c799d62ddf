package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Key describes one config key, generated from Config's struct tags.
type Key struct {
	Name   string // the dotted key, e.g. "limits.max_connections"
	Env    string // its environment variable, e.g. "HERALD_LIMITS_MAX_CONNECTIONS"
	Secret bool   // the value is, or holds, a secret: it is never shown

	index []int        // the field's path from Config, for reflect.Value.FieldByIndex
	typ   reflect.Type // one of the leaf types below
	url   bool         // a database URL: only its password is a secret
}

// envPrefix begins every variable Herald reads.
const envPrefix = "HERALD_"

// aliasDatabaseURL is `herald tail`'s variable, accepted by `herald serve` too so one exported
// variable serves both.
const aliasDatabaseURL = "HERALD_DATABASE_URL"

// exemptEnv are the prefixes of variables that belong to development scripts and tests, or to
// the herald commands' own flags (serve's --config, sub's --url and --token), not to the
// server's settings; each is matched whole or followed by "_".
var exemptEnv = []string{"HERALD_TEST", "HERALD_TESTENV", "HERALD_DEMO", "HERALD_CONFIG", "HERALD_URL", "HERALD_TOKEN"}

var (
	typString   = reflect.TypeFor[string]()
	typBool     = reflect.TypeFor[bool]()
	typInt      = reflect.TypeFor[int]()
	typSize     = reflect.TypeFor[Size]()
	typDuration = reflect.TypeFor[time.Duration]()
	typList     = reflect.TypeFor[[]string]()
)

// Keys returns every config key in the order of the file.
func Keys() []Key { return slices.Clone(keys()) }

var keys = sync.OnceValue(func() []Key {
	var out []Key
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("yaml")
			if !f.IsExported() || tag == "" || f.Tag.Get("config") == "rules" {
				continue // the policy's rule mappings are read by fileDecoder.rules
			}
			name := prefix + strings.TrimSuffix(tag, ",omitempty")
			idx := append(slices.Clone(index), i)
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, name+".", idx)
				continue
			}
			switch f.Type {
			case typString, typBool, typInt, typSize, typDuration, typList:
			default:
				panic(fmt.Sprintf("config: key %s has type %s, which the loader cannot read", name, f.Type))
			}
			secret := f.Tag.Get("secret")
			out = append(out, Key{
				Name:   name,
				Env:    envPrefix + strings.ToUpper(strings.ReplaceAll(name, ".", "_")),
				Secret: secret != "",
				index:  idx,
				typ:    f.Type,
				url:    secret == "url",
			})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
})

// keyNamed finds a key by its dotted name; an index suffix ("auth.secrets[1]") is ignored.
func keyNamed(name string) (Key, bool) {
	name, _, _ = strings.Cut(name, "[")
	for _, k := range keys() {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// field returns k's field in c, settable.
func (k Key) field(c *Config) reflect.Value {
	return reflect.ValueOf(c).Elem().FieldByIndex(k.index)
}

// Format returns the value of k in c as it is written in the file and the environment: lists
// comma-separated, sizes and durations in their units. Secret values come out as written, so
// call it on a Redacted copy to show them.
func (k Key) Format(c *Config) string {
	v := k.field(c)
	switch k.typ {
	case typList:
		return strings.Join(v.Interface().([]string), ",")
	case typSize:
		return v.Interface().(Size).String()
	case typDuration:
		return v.Interface().(time.Duration).String()
	}
	return fmt.Sprint(v.Interface())
}

// set parses s into k's field of c. fromEnv says s is one environment value, so a list is
// comma-separated. Its error is a Detail: it quotes s only when k is not a secret.
func (k Key) set(c *Config, s string, fromEnv bool) error {
	v := k.field(c)
	shown := strconv.Quote(s)
	if k.Secret {
		shown = "the value"
	}
	switch k.typ {
	case typString:
		v.SetString(s)
	case typBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%s is not a boolean: want true or false", shown)
		}
		v.SetBool(b)
	case typInt:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%s is not a whole number", shown)
		}
		v.SetInt(int64(n))
	case typSize:
		n, err := ParseSize(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case typDuration:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			if _, nerr := strconv.Atoi(strings.TrimSpace(s)); nerr == nil {
				return fmt.Errorf("%s has no unit: write a Go duration such as %ss", shown, strings.TrimSpace(s))
			}
			return fmt.Errorf("%s is not a duration: write a Go duration such as 10s, 1m30s or 500ms", shown)
		}
		v.SetInt(int64(d))
	case typList:
		if !fromEnv {
			return fmt.Errorf("want a list")
		}
		var items []string
		for _, item := range strings.Split(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
		v.Set(reflect.ValueOf(items))
	}
	return nil
}

// setList sets k, a list, to items; an empty list is stored as nil, as in Default.
func (k Key) setList(c *Config, items []string) {
	if len(items) == 0 {
		items = nil
	}
	k.field(c).Set(reflect.ValueOf(items))
}

// fix says how to set k: to what, with a valid example in the file and in the environment.
func (k Key) fix(want, example string) string {
	return fmt.Sprintf("set %s to %s, e.g. %s in the config file or %s=%s",
		k.Name, want, k.yamlExample(example), k.Env, shellQuote(example))
}

// yamlExample writes key: value as one line of YAML, nesting with a flow mapping.
func (k Key) yamlExample(example string) string {
	val := yamlQuote(example)
	if k.typ == typList {
		var items []string
		for _, it := range strings.Split(example, ",") {
			items = append(items, yamlQuote(strings.TrimSpace(it)))
		}
		val = "[" + strings.Join(items, ", ") + "]"
	}
	section, leaf, nested := strings.Cut(k.Name, ".")
	if !nested {
		return section + ": " + val
	}
	return section + ": {" + leaf + ": " + val + "}"
}

func yamlQuote(s string) string {
	if s == "" || strings.ContainsAny(s, ":{}[],#&*!|>'\"%@` ") {
		return strconv.Quote(s)
	}
	return s
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"$`\\|&;<>()*?[]#~{}") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
