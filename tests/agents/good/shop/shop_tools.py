"""The shop agent's Python tool (a test fixture): an order lookup that answers from a table."""

ORDERS = {"1042": "shipped"}


async def order_status(arguments, context):
    return {"order": arguments["order"], "status": ORDERS.get(arguments["order"], "unknown")}


def not_async(arguments, context):
    return {}
