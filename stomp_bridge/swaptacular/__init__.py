"""The Swaptacular peer profile: rules, certificate login, manifest, forwarder."""
