package config

import (
	"encoding/json"

	"github.com/mcptrace/mcptrace/procmatch"

	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// defaultFile is DefaultFile; tests point it elsewhere.
var defaultFile = DefaultFile

// BindFlags registers options on fs as flags named by their keys, with
// their defaults and help texts: the options keys names, or every one
// when keys is empty (the agent's). A key that is no option panics.
func BindFlags(fs *pflag.FlagSet, keys ...string) {
	d := Default()
	opts := d.options()
	if len(keys) > 0 {
		var some []option
		for _, k := range keys {
			i := slices.IndexFunc(opts, func(o option) bool { return o.key == k })
			if i < 0 {
				panic("config: BindFlags: no option " + k)
			}
			some = append(some, opts[i])
		}
		opts = some
	}
	for _, o := range opts {
		switch v := o.value.(type) {
		case *string:
			fs.String(o.key, *v, o.usage)
		case *int:
			fs.Int(o.key, *v, o.usage)
		case *time.Duration:
			fs.Duration(o.key, *v, o.usage)
		case *bool:
			fs.Bool(o.key, *v, o.usage)
		case *os.FileMode:
			fs.String(o.key, formatMode(*v), o.usage)
		case *[]procmatch.Rule: // sessions.rules and enforcer.spare
			// Lists are read from the configuration file only.
		default:
			panic(fmt.Sprintf("config: option %s has unsupported type %T", o.key, o.value))
		}
	}
}

// Load returns the configuration from the defaults, overridden by the YAML
// file, then the environment, then the flags of fs that were set (fs may be
// nil). With file "", DefaultFile is read if it exists; a file that is
// named but does not exist is an error, and so is a key in it that is not
// an option. The result is validated.
func Load(file string, flags *pflag.FlagSet) (Config, error) {
	c := Default()
	opts := c.options()

	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()

	path, err := findFile(file)
	if err != nil {
		return Config{}, err
	}
	if path != "" {
		data, err := readTrusted(path)
		if err != nil {
			return Config{}, fmt.Errorf("read config %s: %w", path, err)
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return Config{}, fmt.Errorf("parse config %s: %w", path, err)
		}
		// Only the file has put keys into v so far.
		if err := checkKeys(v, opts); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if flags != nil {
		for _, o := range opts {
			if f := flags.Lookup(o.key); f != nil {
				if err := v.BindPFlag(o.key, f); err != nil {
					return Config{}, fmt.Errorf("bind flag --%s: %w", o.key, err)
				}
			}
		}
	}

	source := func(key string) string {
		if flags != nil {
			if f := flags.Lookup(key); f != nil && f.Changed {
				return " (flag --" + key + ")"
			}
		}
		if name := EnvName(key); os.Getenv(name) != "" {
			return " (" + name + ")"
		}
		if path != "" && v.InConfig(key) {
			return " (" + path + ")"
		}
		return ""
	}
	var errs []error
	for _, o := range opts {
		if !v.IsSet(o.key) {
			continue
		}
		if err := set(o.value, v.Get(o.key)); err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", o.key, source(o.key), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	if err := c.validate(source); err != nil {
		return Config{}, err
	}
	if path != "" {
		for _, o := range opts {
			if by := source(o.key); v.InConfig(o.key) && by != " ("+path+")" {
				c.Overridden = append(c.Overridden, o.key+by)
			}
		}
	}
	return c, nil
}

// findFile returns the file to read: file, or DefaultFile if it exists, or
// "" for none.
func findFile(file string) (string, error) {
	if file != "" {
		return file, nil
	}
	_, err := os.Stat(defaultFile)
	switch {
	case err == nil:
		return defaultFile, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	}
	return "", fmt.Errorf("stat config %s: %w", defaultFile, err)
}

// EnvName is the environment variable that sets option key:
// MCPTRACE_API_SOCKET for api.socket.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// checkKeys rejects keys in v that are not options. An empty section
// ("api:" with nothing under it) is allowed.
func checkKeys(v *viper.Viper, opts []option) error {
	known := make([]string, len(opts))
	for i, o := range opts {
		known[i] = o.key
	}
	keys := v.AllKeys()
	slices.Sort(keys)
	var errs []error
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		var section []string
		for _, o := range known {
			if strings.HasPrefix(o, k+".") {
				section = append(section, o)
			}
		}
		switch {
		case section != nil && v.Get(k) == nil:
			continue
		case section != nil:
			errs = append(errs, fmt.Errorf("%s is a section (%s), not a value", k, strings.Join(section, ", ")))
		default:
			msg := fmt.Sprintf("unknown key %s", k)
			if s := Closest(k, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			errs = append(errs, errors.New(msg))
		}
	}
	return errors.Join(errs...)
}

// Closest returns the word of known nearest to k by edit distance, if it
// is near enough to be a typo: configuration keys here, flag names in
// the command line's "did you mean".
func Closest(k string, known []string) string {
	best, bestDist := "", 4
	for _, o := range known {
		if d := editDistance(k, o); d < bestDist {
			best, bestDist = o, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// set stores raw, as viper found it in the file, environment or a flag,
// into the field dst points to.
func set(dst, raw any) error {
	switch dst := dst.(type) {
	case *string:
		s, ok := raw.(string)
		if !ok {
			return fmt.Errorf("want a string, got %v", raw)
		}
		*dst = s
	case *int:
		n, err := toInt(raw)
		if err != nil {
			return err
		}
		*dst = n
	case *time.Duration:
		d, err := toDuration(raw)
		if err != nil {
			return err
		}
		*dst = d
	case *bool:
		switch b := raw.(type) {
		case bool:
			*dst = b
		case string:
			v, err := strconv.ParseBool(strings.TrimSpace(b))
			if err != nil {
				return fmt.Errorf("want true or false, got %q", b)
			}
			*dst = v
		default:
			return fmt.Errorf("want true or false, got %v", raw)
		}
	case *[]procmatch.Rule:
		return decodeList(raw, dst)
	case *os.FileMode:
		s, ok := raw.(string)
		if !ok {
			return fmt.Errorf(`want an octal mode as a string such as "0660", got the number %v (YAML reads an unquoted 0660 as the number 432: quote the mode)`, raw)
		}
		m, err := parseMode(s)
		if err != nil {
			return err
		}
		*dst = m
	default:
		return fmt.Errorf("unsupported option type %T", dst)
	}
	return nil
}

func toInt(raw any) (int, error) {
	switch n := raw.(type) {
	case int:
		return n, nil
	case int64:
		if n >= math.MinInt && n <= math.MaxInt {
			return int(n), nil
		}
	case uint64:
		if n <= math.MaxInt {
			return int(n), nil
		}
	case string:
		i, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil {
			return 0, fmt.Errorf("want a whole number, got %q", n)
		}
		return i, nil
	}
	return 0, fmt.Errorf("want a whole number, got %v", raw)
}

func toDuration(raw any) (time.Duration, error) {
	switch d := raw.(type) {
	case time.Duration:
		return d, nil
	case string:
		v, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return 0, fmt.Errorf("want a duration such as 90s, 5m or 1h30m, got %q", d)
		}
		return v, nil
	}
	return 0, fmt.Errorf("want a duration with a unit such as 90s, 5m or 1h30m, got %v", raw)
}

// parseMode parses an octal file mode: 0660, 660 or 0o660.
func parseMode(s string) (os.FileMode, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "0o"), "0O")
	m, err := strconv.ParseUint(t, 8, 32)
	if err != nil || t == "" {
		return 0, fmt.Errorf("want an octal mode such as 0660, got %q", s)
	}
	return os.FileMode(m), nil
}

func formatMode(m os.FileMode) string { return fmt.Sprintf("%04o", uint32(m)) }

// decodeList decodes a YAML list of objects strictly: an unknown field in
// an entry is an error naming it.
func decodeList(raw, dst any) error {
	if _, ok := raw.([]any); !ok {
		return fmt.Errorf("want a list, got %v", raw)
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("want a list of objects: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("want a list of objects: %w", err)
	}
	return nil
}

// Keys are the keys of every option, in the order the agent's flags and
// the example file list them.
func Keys() []string {
	d := Default()
	var keys []string
	for _, o := range d.options() {
		keys = append(keys, o.key)
	}
	return keys
}
