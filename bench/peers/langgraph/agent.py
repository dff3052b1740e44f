"""ReAct agent served by the LangGraph Agent Server (peer benchmark).

The chat model is ChatOpenAI pointed at the local scripted fake LLM
(bench/peers/fake_llm.py), so every run is: LLM -> one `echo` tool call -> tool ->
LLM -> final answer of $FAKE_LLM_WORDS words (streamed token by token).
"""

import os

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

FAKE_LLM_BASE_URL = os.environ.get(
    "FAKE_LLM_BASE_URL",
    f"http://127.0.0.1:{os.environ.get('FAKE_LLM_PORT', '18080')}/v1",
)


@tool
def echo(text: str) -> str:
    """Echo the given text back unchanged."""
    return text


model = ChatOpenAI(
    model="fake-model",
    base_url=FAKE_LLM_BASE_URL,
    api_key="x",
    streaming=True,
    temperature=0,
    max_retries=0,
    timeout=30,
)

graph = create_react_agent(
    model,
    tools=[echo],
    prompt="You are a test agent. Call the echo tool once, then answer.",
    name="react_agent",
)
