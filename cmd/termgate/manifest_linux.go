package main

// checkServeArgs checks args as termgate serve would parse them, so a
// unit never carries a flag serve refuses.
func checkServeArgs(args []string) error {
	_, err := parseServe(args, nil)
	return err
}
