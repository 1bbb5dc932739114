"""One module per model API the scripted server speaks.  Each turns a scenario step into a reply."""
