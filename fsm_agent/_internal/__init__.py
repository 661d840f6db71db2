"""The library's private floor: everything behind the public names of `fsm_agent`.

Nothing here is a public interface: names, modules and signatures change without notice. Use the
names `fsm_agent` exports (its `__all__`), `fsm_agent.testing` and the `fsm-agent` command.
The layout is described in docs/contributing.md."""
