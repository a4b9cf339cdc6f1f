package roles

import "strings"

// maxWords bounds the words splitWords keeps of one command, and
// maxCommands the commands of a script it looks through.
const (
	maxWords    = 64
	maxCommands = 8
)

// skipCommands are the shell builtins a script may run before the command
// that matters (cd DIR && npx …).
var skipCommands = map[string]bool{
	"cd": true, "export": true, "set": true, "source": true, ".": true, ":": true,
	"true": true, "unset": true, "umask": true, "ulimit": true, "trap": true,
	"shopt": true, "echo": true, "printf": true,
}

// splitWords splits s into shell words: quotes ('…', "…") and backslashes
// are honoured and removed, variables are left as written. With commands,
// s is a script: the words returned are those of its first command (up to
// ; & | newline parentheses or a redirection) that is not a builtin in
// skipCommands, without leading NAME=VALUE assignments and exec. Only
// whole words are returned: at most maxWords of them.
func splitWords(s string, commands bool) []string {
	var (
		cmd    []string
		cur    strings.Builder
		inWord bool
		n      int // commands looked at
	)
	flush := func() {
		if inWord && len(cmd) < maxWords {
			cmd = append(cmd, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	// done reports whether cmd is the command to return; else it starts
	// over with the next one.
	done := func() bool {
		flush()
		if !commands {
			return true
		}
		cmd = trimCommand(cmd)
		if len(cmd) > 0 && !skipCommands[cmd[0]] {
			return true
		}
		cmd = cmd[:0]
		n++
		return n >= maxCommands
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b == '\'':
			inWord = true
			k := strings.IndexByte(s[i+1:], '\'')
			if k < 0 {
				k = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+k])
			i += k + 1
		case b == '"':
			inWord = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
		case b == '\\':
			inWord = true
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					cur.WriteByte(s[i])
				}
			}
		case b == ' ' || b == '\t' || b == '\r':
			flush()
		case commands && strings.IndexByte(";&|\n()<>", b) >= 0:
			if done() {
				return cmd
			}
		case b == '\n':
			flush()
		default:
			inWord = true
			cur.WriteByte(b)
		}
	}
	if done() {
		return cmd
	}
	return nil
}

// trimCommand drops a command's leading assignments and exec.
func trimCommand(ws []string) []string {
	for len(ws) > 0 && (isAssign(ws[0]) || ws[0] == "exec" || ws[0] == "command") {
		ws = ws[1:]
	}
	return ws
}
