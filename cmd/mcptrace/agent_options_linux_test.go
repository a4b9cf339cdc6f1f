package main

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/config"
	"github.com/mcptrace/mcptrace/enforcer"
)

// TestEveryConfigValueReachesTheAgent: every value of a configuration
// (but the log settings, which make the logger) ends up in agent.Options,
// so a config key added without passing it on fails here. Each leaf gets a
// value no other leaf has; the options are then searched for it.
func TestEveryConfigValueReachesTheAgent(t *testing.T) {
	var cfg config.Config
	n := 0
	var fill func(path string, v reflect.Value)
	fill = func(path string, v reflect.Value) {
		if path == "Config.Overridden" {
			return // a report of Load, not an option
		}
		n++
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				fill(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		case reflect.String:
			v.SetString(fmt.Sprintf("/value/%d", n))
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int64:
			if v.Type() == reflect.TypeFor[time.Duration]() {
				v.SetInt(int64(time.Duration(n) * time.Millisecond))
			} else {
				v.SetInt(int64(100_000 + n))
			}
		case reflect.Uint32:
			v.SetUint(uint64(0o600))
		case reflect.Slice:
			// Rule lists: one rule each, named after the path.
			r := reflect.New(v.Type().Elem()).Elem()
			r.FieldByName("Name").SetString(fmt.Sprintf("rule-%d", n))
			v.Set(reflect.Append(v, r))
		default:
			t.Fatalf("%s: no test value for kind %v", path, v.Kind())
		}
	}
	fill("Config", reflect.ValueOf(&cfg).Elem())
	// Values EnforcerConfig validates: valid ones that are not the default.
	cfg.Enforcer.Mode, cfg.Enforcer.Policy = string(enforcer.ModeAudit), string(enforcer.PolicyImmediate)
	cfg.Enforcer.Spare[0].Comm = []string{"spared"}
	cfg.Sessions.DefaultRules = false // true is the default: false proves it is passed on

	opts, err := agentOptions(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	var collect func(v reflect.Value)
	collect = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					collect(v.Field(i))
				}
			}
		case reflect.Slice:
			for i := range v.Len() {
				collect(v.Index(i))
			}
		case reflect.Pointer:
			// A value the agent may leave unset (Options.Nice): what it
			// points to, not another struct's insides.
			if !v.IsNil() && v.Elem().Kind() != reflect.Struct {
				collect(v.Elem())
			}
		case reflect.Func, reflect.Interface:
		default:
			got[fmt.Sprint(v.Interface())] = true
		}
	}
	collect(reflect.ValueOf(opts))

	var missing []string
	var check func(path string, v reflect.Value)
	check = func(path string, v reflect.Value) {
		switch {
		case strings.HasPrefix(path, "Config.Log."):
			return // makes the logger, which agentOptions passes as given
		case v.Kind() == reflect.Struct:
			for i := range v.NumField() {
				check(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		case v.Kind() == reflect.Bool:
			// Checked below by name: true and false are everywhere.
		case v.Kind() == reflect.Slice:
			for i := range v.Len() {
				if name := v.Index(i).FieldByName("Name").String(); !got[name] {
					missing = append(missing, path)
				}
			}
		default:
			if !got[fmt.Sprint(v.Interface())] {
				missing = append(missing, fmt.Sprintf("%s (%v)", path, v.Interface()))
			}
		}
	}
	check("Config", reflect.ValueOf(cfg))
	if opts.Sessions.DefaultRules != cfg.Sessions.DefaultRules || opts.Enforcer.CrossUID != cfg.Enforcer.CrossUID {
		missing = append(missing, "a bool of Sessions or Enforcer")
	}
	if opts.Logger == nil {
		missing = append(missing, "the logger")
	}
	for _, m := range missing {
		t.Errorf("%s does not reach agent.Options", m)
	}
}
