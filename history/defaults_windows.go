package history

// DefaultDir is on disk, under ProgramData, which only administrators may
// write.
const DefaultDir = `C:\ProgramData\mcptrace\history`
