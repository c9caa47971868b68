"""Image-generation engines: ``diffusers`` in-process (``diffusers_engine.py``), a ComfyUI server running the
user's workflow (``comfyui.py``, its prompts' messages read in ``comfyui_messages.py``, ``workflow.py``) and
OpenAI-compatible image servers (``openai_images.py``), behind the bench runner's engine protocol
(``adapter.py``; registered by kind in ``engines/registry.py``). diffusers is imported in ``imports.py`` only,
Pillow in ``thumbs.py`` only, both lazily. docs/image.md."""
