package config

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mcptrace/mcptrace/procmatch"
)

// WriteExample writes a configuration file that sets nothing: every
// option, in the order of Default, as a comment with its help text and
// its default value, to be uncommented where a node needs another. The
// Debian package installs it as DefaultFile; it is generated from the
// options (config.go), never written by hand, so it cannot drift from
// them.
func WriteExample(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format+"\n", args...) }
	p("# mcptrace agent configuration (%s).", DefaultFile)
	p("#")
	p("# Every option is listed with its default, commented out: uncomment a line")
	p("# to change it. Flags (--section.option) and the environment")
	p("# (%s_SECTION_OPTION, dots and dashes as underscores) override this file.", EnvPrefix)
	p("# `mcptrace agent --help` lists the same options.")
	d := Default()
	section := ""
	for _, o := range d.options() {
		sec, key, _ := strings.Cut(o.key, ".")
		if sec != section {
			section = sec
			p("")
			p("%s:", sec)
		}
		for _, line := range wrap(o.usage, 72) {
			p("  # %s", line)
		}
		v, err := exampleValue(o.value)
		if err != nil {
			return fmt.Errorf("config: option %s: %w", o.key, err)
		}
		p("  #%s: %s", key, v)
	}
	return bw.Flush()
}

// exampleValue is an option's default as YAML.
func exampleValue(v any) (string, error) {
	switch v := v.(type) {
	case *string:
		return strconv.Quote(*v), nil
	case *int:
		return strconv.Itoa(*v), nil
	case *bool:
		return strconv.FormatBool(*v), nil
	case *time.Duration:
		return strconv.Quote(v.String()), nil
	case *os.FileMode:
		return strconv.Quote(formatMode(*v)), nil
	case *[]procmatch.Rule:
		if len(*v) > 0 {
			return "", fmt.Errorf("a list default of %d rules has no example form", len(*v))
		}
		return "[]", nil
	}
	return "", fmt.Errorf("unsupported type %T", v)
}

// wrap cuts s into lines of at most width bytes at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
