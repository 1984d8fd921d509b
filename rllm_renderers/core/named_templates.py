"""A tokenizer that ships several named chat templates: the one ``apply_chat_template`` uses, per call.

Hermes-2-Pro and Command-R ship ``chat_template = {"default": A, "tool_use": B}``. transformers
(``get_chat_template``) renders a call with ``tools`` (any value but None, an empty list too)
with ``tool_use`` when that name exists, else with ``default``. A renderer compiled from A alone
would render tool conversations with the wrong template, silently. :class:`NamedTemplates` holds
one renderer per template and picks the same one for each call; a template no renderer was
compiled from makes the calls that would use it raise, naming it.
"""

from __future__ import annotations

from typing import Any

TOOL_USE = "tool_use"
DEFAULT = "default"


def template_name_for(names: Any, tools: Any) -> str:
    """The name ``apply_chat_template`` picks among ``names`` for a call with ``tools``."""
    return TOOL_USE if tools is not None and TOOL_USE in names else DEFAULT


class NamedTemplates:
    """Dispatches each call to the renderer of the template transformers would choose for it.

    ``renderers`` maps template names to renderers (``default`` required); ``missing`` maps the
    names that have none to why, which the calls needing them raise as a ValueError.
    """

    def __init__(self, renderers: dict[str, Any], missing: dict[str, str]) -> None:
        if DEFAULT not in renderers:
            raise ValueError("NamedTemplates needs a renderer for the 'default' template")
        self.renderers = dict(renderers)
        self.missing = dict(missing)

    def __repr__(self) -> str:
        shown = {name: type(renderer).__name__ for name, renderer in self.renderers.items()}
        return f"NamedTemplates({shown}, missing={sorted(self.missing)})"

    def renderer_for(self, tools: Any) -> Any:
        name = template_name_for({*self.renderers, *self.missing}, tools)
        if name in self.missing:
            raise ValueError(
                f"this call has tools, so apply_chat_template renders it with the tokenizer's {name!r} template, "
                f"and no renderer covers it: {self.missing[name]}"
            )
        return self.renderers[name]

    # --- the calls whose template depends on tools ---------------------------------------------

    def render(self, messages, *, tools=None, add_generation_prompt=False):
        return self.renderer_for(tools).render(messages, tools=tools, add_generation_prompt=add_generation_prompt)

    def render_ids(self, messages, *, tools=None, add_generation_prompt=False):
        return self.renderer_for(tools).render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt)

    def render_text(self, messages, *, tools=None, add_generation_prompt=False):
        return self.renderer_for(tools).render_text(messages, tools=tools, add_generation_prompt=add_generation_prompt)

    def parse_response(self, token_ids, *, tools=None, **kwargs):
        return self.renderer_for(tools).parse_response(token_ids, tools=tools, **kwargs)

    def bridge_to_next_turn(self, previous_prompt_ids, previous_completion_ids, new_messages, *, tools=None, **kwargs):
        return self.renderer_for(tools).bridge_to_next_turn(
            previous_prompt_ids, previous_completion_ids, new_messages, tools=tools, **kwargs
        )

    # --- the calls that hold for every template -------------------------------------------------

    @property
    def is_prefix_stable(self) -> bool:
        return all(renderer.is_prefix_stable for renderer in self.renderers.values())

    def get_stop_token_ids(self) -> list[int]:
        """Every template's stop tokens (a sampler does not know which template wrote the prompt)."""
        ids = [token for renderer in self.renderers.values() for token in renderer.get_stop_token_ids()]
        return list(dict.fromkeys(ids))

    def get_stop_strings(self) -> list[str]:
        strings = [text for renderer in self.renderers.values() for text in renderer.get_stop_strings()]
        return list(dict.fromkeys(strings))

    def __getattr__(self, name: str) -> Any:  # decode, tokenizer, ...: the default template's renderer
        if name in ("renderers", "missing"):
            raise AttributeError(name)
        return getattr(self.renderers[DEFAULT], name)
