//go:build !windows

package main

// localTreeSource is nil here: tree asks the agent.
func localTreeSource() (treeSource, error) { return nil, nil }
